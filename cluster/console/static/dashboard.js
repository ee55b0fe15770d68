// The Dashboard: polls /dashboard/data every 3 s and draws uPlot charts (time in epoch
// seconds, one series per broker or topic), plus the tables of the current TPS.
(function () {
  var charts = {};
  var COLORS = ["#1769aa", "#c2410c", "#15803d", "#7c3aed", "#be123c", "#0e7490", "#a16207", "#4d7c0f"];

  function draw(id, times, series) {
    var names = Object.keys(series);
    var el = document.getElementById(id);
    var data = [times].concat(names.map(function (n) { return series[n]; }));
    var key = names.join("|");
    if (charts[id] && charts[id].key === key) {
      charts[id].plot.setData(data);
      return;
    }
    if (charts[id]) { charts[id].plot.destroy(); }
    var opts = {
      width: Math.max(320, el.clientWidth), height: 220,
      series: [{}].concat(names.map(function (n, i) {
        return { label: n, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true };
      })),
      axes: [{}, { label: "msg/s" }],
    };
    charts[id] = { key: key, plot: new uPlot(opts, data, el) };
  }

  function fill(id, rows) {
    var body = document.querySelector("#" + id + " tbody");
    body.replaceChildren();
    rows.forEach(function (r) {
      var tr = document.createElement("tr");
      var a = document.createElement("td"); a.textContent = r[0];
      var b = document.createElement("td"); b.textContent = r[1]; b.className = "num";
      tr.append(a, b); body.append(tr);
    });
  }

  function poll() {
    fetch("/dashboard/data", { headers: { "Accept": "application/json" } })
      .then(function (r) {
        // a session past its lifetime is sent to the login page: follow it there
        if (r.redirected) { window.location.assign(r.url); return null; }
        return r.json();
      })
      .then(function (d) {
        if (d === null) { return; }
        var err = document.getElementById("dashboard-error");
        err.hidden = !d.error; err.textContent = d.error || "";
        draw("chart-put", d.t, d.put);
        draw("chart-get", d.t, d.get);
        draw("chart-topics", d.t, d.topics);
        fill("now-topics", d.now.topics);
        fill("now-groups", d.now.groups);
        document.getElementById("dashboard-updated").textContent =
          d.t.length + " sample(s), last at " + new Date(d.t[d.t.length - 1] * 1000).toLocaleTimeString();
      })
      .catch(function (e) {
        var err = document.getElementById("dashboard-error");
        err.hidden = false; err.textContent = "the console did not answer: " + e;
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    poll();
    setInterval(poll, 3000);
  });
})();
