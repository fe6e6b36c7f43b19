// Live updates: every data-refresh milliseconds the page fetches itself with
// the X-Stageq-Partial header and swaps in the new content block, so counts,
// bars and the timeline move without a reload. It skips a turn while the
// user types in a form field or the tab is hidden, stops once a form of the
// page was edited (its "live" mark then reads "paused"), and never runs on the
// confirmation page (its refresh is 0).
(function () {
  var body = document.body;
  var every = parseInt(body.getAttribute('data-refresh') || '0', 10);
  var main = document.getElementById('content');
  var live = document.getElementById('live');
  if (!every || !main) return;
  var busy = false;
  var last = main.innerHTML;
  // Once the user types into a form of the page, its content stays as it is
  // (a half-typed value is never replaced) until the page is left.
  // The badge says so: a page that no longer refreshes must not read "live".
  var dirty = false;
  main.addEventListener('input', function () {
    if (dirty) return;
    dirty = true;
    if (live) {
      live.classList.remove('off');
      live.classList.add('paused');
      live.textContent = 'paused';
      live.title = 'live updates paused: a form on this page was edited; reload the page to resume them';
    }
  });
  function editing() {
    var a = document.activeElement;
    return a && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName);
  }
  function tick() {
    if (busy || dirty || document.hidden || editing()) return;
    busy = true;
    // A server that never answers (its network gone) must not hold every
    // later turn back with the badge still showing "live".
    var ctl = new AbortController();
    var giveUp = setTimeout(function () { ctl.abort(); }, Math.max(4 * every, 30000));
    fetch(location.href, { headers: { 'X-Stageq-Partial': '1' }, credentials: 'same-origin', cache: 'no-store', signal: ctl.signal })
      .then(function (r) {
        if (!r.ok) throw new Error(r.status);
        return r.text();
      })
      .then(function (html) {
        if (live) live.classList.remove('off');
        // Unchanged content is left alone: no flicker, hover and selection stay.
        // A field focused while the fetch was under way is kept as well: the
        // swap would drop the focus and the selection the user just made.
        if (html === last || dirty || editing()) return;
        last = html;
        main.innerHTML = html;
        body.setAttribute('data-updates', String(parseInt(body.getAttribute('data-updates'), 10) + 1));
        if (live) live.classList.remove('off');
      })
      .catch(function () { if (live && !dirty) live.classList.add('off'); })
      .then(function () { clearTimeout(giveUp); busy = false; });
  }
  setInterval(tick, every);
})();
