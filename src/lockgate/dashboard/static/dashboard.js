// lockgate dashboard: partial updates and live data on top of pages that read without script.
//   form[data-hx-target]   a filter form: each change fetches the page's live part (HX-Request)
//                          into the target and mirrors the filters into the URL.
//   [data-live]            a Server-Sent Events stream: each "swap" event replaces the element's content.
//   [data-live-poll]       a partial fetched again every few seconds.
//   [data-stream]          a run's stream (docs/streams.md): chunks appended as they come, a reset's
//                          attempt dropped; its section is shown once the first chunk arrives.
(function () {
  "use strict";
  var streams = new Map();

  function keyOf(el) {
    if (!el || el === document.body) return null;
    return el.id ? "#" + el.id : (el.getAttribute("href") || el.getAttribute("data-verb") || null);
  }

  function swap(target, html) {
    var focused = target.contains(document.activeElement) ? keyOf(document.activeElement) : null;
    target.innerHTML = html;
    if (focused) {
      var again = focused.charAt(0) === "#" ? target.querySelector(focused)
        : target.querySelector('[href="' + CSS.escape(focused) + '"], [data-verb="' + CSS.escape(focused) + '"]');
      if (again) again.focus();
    }
  }

  function listen(el) {
    var url = el.getAttribute("data-live");
    var open = streams.get(el);
    if (open && open.url === url) return;
    if (open) open.source.close();
    if (!window.EventSource) return;
    var source = new EventSource(url);
    source.addEventListener("swap", function (e) { swap(el, e.data); });
    source.addEventListener("gone", function () { source.close(); });
    streams.set(el, { url: url, source: source });
  }

  function partial(form) {
    var target = document.querySelector(form.getAttribute("data-hx-target"));
    var params = new URLSearchParams(new FormData(form));
    Array.from(params.keys()).forEach(function (k) { if (!params.get(k)) params.delete(k); });
    var query = params.toString();
    var url = form.action + (query ? "?" + query : "");
    fetch(url, { headers: { "HX-Request": "true" } }).then(function (r) { return r.text(); }).then(function (html) {
      swap(target, html);
      history.replaceState(null, "", url);
      var mirror = document.querySelector("[data-mirror-query]");
      if (mirror) mirror.value = query;
      if (target.hasAttribute("data-live")) {
        var live = target.getAttribute("data-live").split("?")[0];
        target.setAttribute("data-live", live + (query ? "?" + query : ""));
        listen(target);
      }
    });
  }

  function follow(el) {
    if (!window.EventSource) return;
    var box = el.closest("section");
    var state = box.querySelector("[data-stream-state]");
    var parts = [];
    var source = new EventSource(el.getAttribute("data-stream"));
    function render() {
      el.textContent = parts.map(function (p) {
        return typeof p.data === "string" ? p.data : JSON.stringify(p.data) + "\n";
      }).join("");
      el.scrollTop = el.scrollHeight;
    }
    source.addEventListener("chunk", function (e) { parts.push(JSON.parse(e.data)); box.hidden = false; render(); });
    source.addEventListener("reset", function (e) {
      var r = JSON.parse(e.data);
      parts = parts.filter(function (p) { return !(p.step === r.step && p.attempt === r.attempt); });
      render();
    });
    source.addEventListener("end", function (e) { source.close(); state.textContent = "(" + JSON.parse(e.data).status + ")"; });
    streams.set(el, { url: el.getAttribute("data-stream"), source: source });
  }

  function debounce(fn, ms) {
    var timer = null;
    return function () { clearTimeout(timer); timer = setTimeout(fn, ms); };
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form[data-hx-target]").forEach(function (form) {
      var later = debounce(function () { partial(form); }, 300);
      form.addEventListener("submit", function (e) { e.preventDefault(); partial(form); });
      form.addEventListener("change", later);
      form.addEventListener("input", function (e) { if (e.target.type === "search") later(); });
    });
    document.querySelectorAll("[data-live]").forEach(listen);
    document.querySelectorAll("[data-stream]").forEach(follow);
    document.querySelectorAll("[data-live-poll]").forEach(function (el) {
      setInterval(function () {
        fetch(el.getAttribute("data-live-poll"), { headers: { "HX-Request": "true" } })
          .then(function (r) { return r.text(); }).then(function (html) { swap(el, html); });
      }, 3000);
    });
  });
  window.addEventListener("pagehide", function () { streams.forEach(function (s) { s.source.close(); }); });
})();
