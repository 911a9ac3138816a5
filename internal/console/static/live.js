// Live refresh for the ctdispatch console: while the "live" box is ticked
// and the tab is visible, fetch this page again every data-refresh seconds
// and swap in the new #live section. Pages are complete without it.
(function () {
  var box = document.getElementById("live-toggle");
  var live = document.getElementById("live");
  if (!box || !live) return;
  var every = (Number(live.dataset.refresh) || 5) * 1000;
  box.checked = sessionStorage.getItem("ctdispatch-live") !== "off";
  box.addEventListener("change", function () {
    sessionStorage.setItem("ctdispatch-live", box.checked ? "on" : "off");
  });
  setInterval(function () {
    if (!box.checked || document.hidden) return;
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (next) live.replaceChildren.apply(live, Array.from(next.childNodes));
      })
      .catch(function () {});
  }, every);
})();
