// Suggestions for the home page's text inputs, filling each input's <datalist> as the user types (an enhancement
// only: without it the inputs are plain fields of the GET form). In a list of values separated by |, the last one
// is completed and the others kept.
// - Value filters (data-facet="<filter>", its exclusion included): /api/v1/suggest?facet=<filter>&prefix=<beginning>,
//   counted under the form's other filters.
// - Id filters (data-people="authors|institutions"): /api/v1/people offers the release's authors or institutions
//   whose name, or a word of it, begins with what was typed; an option's value is the OpenAlex id, its label the
//   name and works.
"use strict";
(function () {
  var SKIP = { sort: 1, after: 1, limit: 1 };
  function cohort(form, own) {
    var params = new URLSearchParams();
    new FormData(form).forEach(function (value, name) {
      if (value && !SKIP[name] && name !== own) params.append(name, value);
    });
    return params;
  }
  // urlOf(typed) -> the request for the last value typed, or null for none; option(v) -> [value, label] of one answer
  function suggest(input, urlOf, option) {
    var list = document.getElementById(input.getAttribute("list"));
    var timer = null, asked = null;
    if (!list) return;
    input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        var cut = input.value.lastIndexOf("|");
        var kept = cut < 0 ? "" : input.value.slice(0, cut + 1);
        var url = urlOf(input.value.slice(cut + 1).trim());
        if (url === null || url === asked) return;
        asked = url;
        fetch(url, { headers: { Accept: "application/json" } })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (body) {
            if (!body || url !== asked) return;
            while (list.firstChild) list.removeChild(list.firstChild);
            body.values.forEach(function (v) {
              var shown = option(v), element = document.createElement("option");
              element.value = kept + shown[0];
              element.label = shown[1];
              list.appendChild(element);
            });
          })
          .catch(function () {});
      }, 150);
    });
  }
  function count(n) { return n.toLocaleString(document.documentElement.lang); }
  document.querySelectorAll("input[data-facet]").forEach(function (input) {
    suggest(input, function (typed) {
      var params = cohort(input.form, input.name);
      params.set("facet", input.dataset.facet);
      params.set("prefix", typed);
      params.set("limit", "10");
      return "/api/v1/suggest?" + params.toString();
    }, function (v) { return [v.value, v.value + " (" + count(v.count) + ")"]; });
  });
  document.querySelectorAll("input[data-people]").forEach(function (input) {
    suggest(input, function (typed) {
      if (!typed || /^[AaIi][0-9]+$/.test(typed)) return null;  // an id is being typed: nothing to look up
      var params = new URLSearchParams({ kind: input.dataset.people, prefix: typed, limit: "10" });
      return "/api/v1/people?" + params.toString();
    }, function (v) { return [v.id, (v.name || v.id) + " (" + count(v.works) + ")"]; });
  });
})();
