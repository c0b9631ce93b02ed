"""The CSS and JavaScript inlined into every HTML report.

Kept as Python strings (not data files) so they ship with any install of the package
without package-data configuration; the report must never fetch anything at view time.
"""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
:root { --fg:#1a202c; --muted:#5a6577; --bg:#fff; --panel:#f6f8fa; --line:#d8dee4; --accent:#2b6cb0;
        --worse:#c53030; --better:#2f855a; --wall:#cbd5e0; --region:#2b6cb0; }
@media (prefers-color-scheme: dark) {
  :root { --fg:#e2e8f0; --muted:#a0aec0; --bg:#12161c; --panel:#1c222b; --line:#2d3748; --accent:#63b3ed;
          --worse:#fc8181; --better:#68d391; --wall:#4a5568; --region:#63b3ed; }
}
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg); background:var(--bg); }
header, main { max-width:1180px; margin:0 auto; padding:0 20px; }
header { padding-top:18px; }
h1 { font-size:20px; margin:0 0 4px; word-break:break-all; }
h2 { font-size:18px; margin:28px 0 10px; padding-top:8px; border-top:2px solid var(--line); word-break:break-all; }
h3 { font-size:15px; margin:22px 0 8px; }
nav { padding:6px 0 12px; } nav a { color:var(--accent); }
.note, .legend { color:var(--muted); font-size:12px; margin:4px 0; }
.empty { color:var(--muted); font-style:italic; }
.warning { color:#b7791f; }
.cards { display:flex; flex-wrap:wrap; gap:10px; }
.card { background:var(--panel); border:1px solid var(--line); border-radius:6px; padding:8px 12px; min-width:130px; }
.card .k { color:var(--muted); font-size:11px; text-transform:uppercase; letter-spacing:.04em; }
.card .v { font-size:16px; font-weight:600; word-break:break-all; }
.card .s { color:var(--muted); font-size:12px; }
.card.worse .v { color:var(--worse); } .card.better .v { color:var(--better); }
svg.chart { display:block; max-width:100%; height:auto; overflow:visible; }
svg text { font-size:12px; fill:var(--fg); }
svg text.value, svg text.tick-label { fill:var(--muted); font-size:11px; }
.tick { stroke:var(--line); stroke-width:1; } .axis { stroke:var(--muted); stroke-width:1; }
.verdict { font-size:15px; margin:6px 0; } .verdict-line { margin:2px 0; font-size:13px; }
.dg-busy { fill:var(--accent); } table.findings td.text { text-align:left; } h4 { font-size:13px; margin:12px 0 4px; }
.tl-bg { fill:var(--panel); } .tl-bin { fill:var(--accent); } .tl-region .tl-event { opacity:.75; }
.region-bar { fill:var(--region); } .region-wall { fill:var(--wall); }
.diff-bar.worse { fill:var(--worse); } .diff-bar.better { fill:var(--better); }
.sw { display:inline-block; width:10px; height:10px; margin:0 3px 0 10px; vertical-align:middle; }
.region-bar-sw { background:var(--region); } .region-wall-sw { background:var(--wall); }
table { border-collapse:collapse; margin:8px 0; font-size:13px; width:100%; }
th, td { border-bottom:1px solid var(--line); padding:3px 8px; text-align:right; }
th:first-child, td:first-child, th.text, td.text { text-align:left; word-break:break-all; }
table.manifest th { text-align:left; width:200px; color:var(--muted); font-weight:500; vertical-align:top; }
table.manifest td { text-align:left; word-break:break-all; }
table.sortable th { cursor:pointer; user-select:none; }
table.sortable th[data-dir="asc"]::after { content:" ▲"; } table.sortable th[data-dir="desc"]::after { content:" ▼"; }
tr.only_b td:first-child::after { content:" (new)"; color:var(--worse); }
tr.only_a td:first-child::after { content:" (gone)"; color:var(--better); }
details summary { cursor:pointer; color:var(--accent); margin:6px 0; }
ul.files { padding-left:18px; } ul.files .size { color:var(--muted); font-size:12px; }
code { font-size:12px; }
"""

# Click a header of a table.sortable to sort by it; numeric cells carry their value in data-v.
JS = """
(function () {
  "use strict";
  function cellValue(row, i) {
    var cell = row.children[i];
    if (!cell) return "";
    var v = cell.getAttribute("data-v");
    return v === null ? cell.textContent.trim().toLowerCase() : parseFloat(v);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var headers = table.querySelectorAll("thead th");
    headers.forEach(function (th, i) {
      th.addEventListener("click", function () {
        var dir = th.getAttribute("data-dir") === "desc" ? "asc" : "desc";
        headers.forEach(function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", dir);
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a, i), y = cellValue(b, i);
          var c = x < y ? -1 : x > y ? 1 : 0;
          return dir === "asc" ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""
