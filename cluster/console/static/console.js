// Every htmx change carries the CSRF cookie's token back as a header (starlette-csrf's
// double submit); the server refuses a change without it.
document.addEventListener("htmx:configRequest", function (event) {
  var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) {
    event.detail.headers["x-csrftoken"] = decodeURIComponent(match[1]);
  }
});
