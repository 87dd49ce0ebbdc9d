/* metacan index: search by title or OpenAlex id and filters over the rows embedded in index.html.
 *
 * Reads the inert <script type="application/json" id="works-data"> block with JSON.parse (never eval),
 * needs no request (works from file://) and writes rows with createElement/textContent only, never
 * innerHTML, so a title can never become markup. Written by metacan_pipeline.publish.pages.render_index;
 * the page's Content-Security-Policy allows this file ('self') and no other script.
 *
 * The pure part (decode, parseQuery, filterRows, countText) is exported under Node for the tests.
 */
(function (factory) {
  "use strict";
  var api = factory();
  if (typeof module === "object" && module.exports) {
    module.exports = api;
  } else if (typeof document !== "undefined") {
    if (document.readyState === "loading") {
      document.addEventListener("DOMContentLoaded", function () { api.start(document); });
    } else {
      api.start(document);
    }
  }
})(function () {
  "use strict";

  // "W123", "w123" or "https://openalex.org/W123": an id query (SPEC section 2: short ids W + digits).
  var ID_RE = /^(?:https?:\/\/openalex\.org\/)?(w[0-9]{1,19})$/i;
  // what page_path() produces; anything else is not linked (defence in depth, the rows are ours)
  var HREF_RE = /^works\/[A-Za-z0-9][A-Za-z0-9._-]*\/W[0-9]{1,19}\.html$/;

  /** Text as search compares it: compatibility-decomposed (NFKD), combining marks dropped, lower-cased,
   * so "resume" finds "Résumé" (composed or not) and "istanbul" finds "İstanbul". */
  function fold(text) {
    return String(text || "").normalize("NFKD").replace(/[\u0300-\u036f]/g, "").toLowerCase();
  }

  /** {fields: [...], rows: [[...], ...]} -> a list of row objects (plus a folded title to search). */
  function decode(data, unscored) {
    var fields = data.fields, out = new Array(data.rows.length);
    for (var i = 0; i < data.rows.length; i++) {
      var values = data.rows[i], row = {};
      for (var j = 0; j < fields.length; j++) row[fields[j]] = values[j];
      row.titleKey = fold(row.title);
      row.versionKey = row.model_version || unscored;
      row.yearKey = row.year === null || row.year === undefined ? "unknown" : String(row.year);
      out[i] = row;
    }
    return out;
  }

  /** The search box's text -> {text: folded text, id: "W123" when the text is an id, else null}. */
  function parseQuery(q) {
    var text = String(q || "").trim();
    var m = ID_RE.exec(text);
    return { text: fold(text), id: m ? m[1].toUpperCase() : null };
  }

  /** Rows matching every filter. f: {q, route, year, source, mode, version}; "" (or missing) = any.
   * q: case-insensitive substring of the title; an id query (W123) also matches that work exactly.
   * year: a year or "unknown"; version: a model version or the unscored folder name. */
  function filterRows(rows, f) {
    var query = parseQuery(f.q), out = [];
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      if (f.route && r.routes.indexOf(f.route) < 0) continue;
      if (f.year && r.yearKey !== f.year) continue;
      if (f.source && r.source !== f.source) continue;
      if (f.mode && r.mode !== f.mode) continue;
      if (f.version && r.versionKey !== f.version) continue;
      if (query.text && !(r.id === query.id || r.titleKey.indexOf(query.text) >= 0)) continue;
      out.push(r);
    }
    return out;
  }

  function fmt(n) { return n.toLocaleString("en"); }

  /** "N of M works" (what the live region says). */
  function countText(n, total) { return fmt(n) + " of " + fmt(total) + (total === 1 ? " work" : " works"); }

  function cell(doc, tr, text) {
    var td = doc.createElement("td");
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function renderRows(doc, tbody, rows, routeLabels) {
    var frag = doc.createDocumentFragment();
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i], tr = doc.createElement("tr"), td = doc.createElement("td");
      var title = r.title || "(no title)";
      if (HREF_RE.test(r.href)) {
        var a = doc.createElement("a");
        a.setAttribute("href", r.href);
        a.textContent = title;
        td.appendChild(a);
      } else {
        td.appendChild(doc.createTextNode(title));
      }
      td.appendChild(doc.createTextNode(" "));
      var small = doc.createElement("small");
      small.textContent = "(" + r.id + ")";
      td.appendChild(small);
      tr.appendChild(td);
      cell(doc, tr, r.yearKey);
      cell(doc, tr, r.routes.map(function (k) { return routeLabels[k] || k; }).join(", ") || "none");
      cell(doc, tr, r.classification);
      cell(doc, tr, r.model_version || "none (no prediction)");
      frag.appendChild(tr);
    }
    tbody.textContent = "";
    tbody.appendChild(frag);
  }

  function start(doc) {
    var block = doc.getElementById("works-data");
    var unscored = block.getAttribute("data-unscored") || "unscored";
    var maxRows = parseInt(block.getAttribute("data-max-rows"), 10) || 500;
    var rows = decode(JSON.parse(block.textContent), unscored);
    var form = doc.getElementById("filters"), results = doc.getElementById("results");
    var tbody = doc.getElementById("results-body"), count = doc.getElementById("count"), more = doc.getElementById("more");
    var routeLabels = {}, routeSelect = doc.getElementById("f-route");
    for (var i = 0; i < routeSelect.options.length; i++) {
      routeLabels[routeSelect.options[i].value] = routeSelect.options[i].text;
    }
    function value(id) { return doc.getElementById(id).value; }
    function update() {
      var hits = filterRows(rows, { q: value("q"), route: value("f-route"), year: value("f-year"),
                                    source: value("f-source"), mode: value("f-mode"), version: value("f-version") });
      renderRows(doc, tbody, hits.slice(0, maxRows), routeLabels);
      count.textContent = countText(hits.length, rows.length);
      more.textContent = hits.length > maxRows
        ? "Showing the first " + fmt(maxRows) + " of " + fmt(hits.length) + " matches; narrow the search or the filters to see the others."
        : "";
    }
    var timer = null;
    function schedule() {  // one update per burst of keystrokes (filtering a million rows takes a few tens of ms)
      if (timer !== null) clearTimeout(timer);
      timer = setTimeout(function () { timer = null; update(); }, 80);
    }
    form.addEventListener("input", schedule);
    form.addEventListener("change", schedule);
    form.addEventListener("reset", schedule);  // fires before the controls reset; the update runs after
    form.addEventListener("submit", function (e) { e.preventDefault(); update(); });
    form.hidden = false;
    results.hidden = false;
    update();
  }

  return { decode: decode, parseQuery: parseQuery, filterRows: filterRows, countText: countText, start: start };
});
