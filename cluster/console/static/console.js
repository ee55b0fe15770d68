// Every htmx change carries the CSRF cookie's token back as a header (starlette-csrf's
// double submit); the server refuses a change without it.
document.addEventListener("htmx:configRequest", function (event) {
  var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) {
    event.detail.headers["x-csrftoken"] = decodeURIComponent(match[1]);
  }
});
// A change the server refuses for the account (403) still shows its sentence.
document.addEventListener("DOMContentLoaded", function () {
  htmx.config.responseHandling = [
    { code: "204", swap: false },
    { code: "[23]..", swap: true },
    { code: "403", swap: true, error: true },
    { code: "[45]..", swap: false, error: true },
  ];
});
