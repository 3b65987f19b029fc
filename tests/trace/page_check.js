/* Appended to a copy of a `deltafin trace report --html` page by
 * tests/e2e/test_trace_report.sh and run by headless Chromium: checks the
 * page as drawn and writes one line, "DF-CHECK {json}", into <pre id="df-check">.
 * window.DF_EXPECT_TOKENS is set by the test before this runs. */
(function () {
  var out = {ok: true, problems: []};
  function bad(m) { out.ok = false; if (out.problems.length < 20) out.problems.push(m); }
  var panels = document.querySelectorAll('g.drive-panel');
  out.drives = panels.length;
  if (!panels.length) bad('no drive panel');
  var best = 0;
  panels.forEach(function (p) {
    var d = p.getAttribute('data-drive');
    var ceil = p.querySelector('line.ceiling');
    var total = p.querySelector('path.total');
    if (!ceil) { bad('drive ' + d + ': no ceiling line'); return; }
    if (!total) { bad('drive ' + d + ': no throughput drawn'); return; }
    var cy = parseFloat(ceil.getAttribute('y1'));
    /* the highest point drawn for this drive (SVG y grows downwards) */
    var top = total.getBBox().y;
    var frame = p.querySelector('rect[fill="none"]').getBBox();
    var zero = frame.y + frame.height, h = zero - cy;
    var frac = (zero - top) / h;
    if (frac > best) best = frac;
    if (top < cy - 0.01)
      bad('drive ' + d + ': plotted throughput ' + (frac * 100).toFixed(1) + '% of the ceiling');
    var lab = p.querySelector('.ceiling-label');
    if (!lab || !/[0-9] MB\/s$/.test(lab.textContent)) bad('drive ' + d + ': ceiling label without MB/s');
    var yt = p.querySelectorAll('g.ytick text');
    if (yt.length < 2) bad('drive ' + d + ': ' + yt.length + ' y ticks');
    if (!/MB\/s/.test(yt[yt.length - 1].textContent)) bad('drive ' + d + ': y axis without a unit');
  });
  out.highest_of_ceiling = best;
  var marks = document.querySelectorAll('line.tok-mark');
  out.token_marks = marks.length;
  if (marks.length !== window.DF_EXPECT_TOKENS)
    bad(marks.length + ' token marks, expected ' + window.DF_EXPECT_TOKENS);
  var xt = [];
  document.querySelectorAll('g.xtick text').forEach(function (t) { xt.push(t.textContent); });
  out.time_ticks = xt.length;
  if (xt.length < 6) bad('only ' + xt.length + ' labelled x ticks');
  var sec = xt.filter(function (s) { return /^[0-9]+(\.[0-9]+)?$/.test(s); });
  if (sec.length !== xt.length) bad('x tick labels that are not numbers: ' + xt.slice(0, 5));
  if (!document.querySelector('.axis-title') || !/time \(s/.test(document.body.textContent))
    bad('no time axis title in seconds');
  if (!document.querySelector('rect.prefill')) bad('no prefill mark');
  /* labels that overlap: every pair of text boxes inside the charts */
  var boxes = [];
  document.querySelectorAll('svg text').forEach(function (t) {
    var r = t.getBoundingClientRect();
    if (r.width > 0) boxes.push({r: r, s: t.textContent});
  });
  out.labels = boxes.length;
  var overlaps = 0;
  for (var i = 0; i < boxes.length; i++)
    for (var j = i + 1; j < boxes.length; j++) {
      var a = boxes[i].r, b = boxes[j].r;
      var w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      var h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 1 && h > 1) {
        overlaps++;
        bad('labels overlap: "' + boxes[i].s + '" and "' + boxes[j].s + '"');
      }
    }
  out.overlaps = overlaps;
  /* readable without a network: nothing loaded from elsewhere */
  document.querySelectorAll('[src],link[href]').forEach(function (e) {
    if (e.id !== 'df-check-script') bad('external resource: ' + e.outerHTML.slice(0, 80));
  });
  var pre = document.createElement('pre');
  pre.id = 'df-check';
  pre.textContent = 'DF-CHECK ' + JSON.stringify(out);
  document.body.appendChild(pre);
})();
