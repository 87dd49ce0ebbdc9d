// Value suggestions of the home page: fills the <datalist> of each text filter input (data-facet="<filter>", its
// exclusion included) from /api/v1/suggest?facet=<filter>&prefix=<beginning>, counted under the form's other
// filters. In a list of values separated by |, the last one is completed and the others kept. An enhancement
// only: without it the inputs are plain fields of the GET form.
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
  document.querySelectorAll("input[data-facet]").forEach(function (input) {
    var list = document.getElementById(input.getAttribute("list"));
    var timer = null, asked = null;
    if (!list) return;
    input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        var cut = input.value.lastIndexOf("|");
        var kept = cut < 0 ? "" : input.value.slice(0, cut + 1);
        var params = cohort(input.form, input.name);
        params.set("facet", input.dataset.facet);
        params.set("prefix", input.value.slice(cut + 1).trim());
        params.set("limit", "10");
        var url = "/api/v1/suggest?" + params.toString();
        if (url === asked) return;
        asked = url;
        fetch(url, { headers: { Accept: "application/json" } })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (body) {
            if (!body || url !== asked) return;
            while (list.firstChild) list.removeChild(list.firstChild);
            body.values.forEach(function (v) {
              var option = document.createElement("option");
              option.value = kept + v.value;
              option.label = v.value + " (" + v.count.toLocaleString(document.documentElement.lang) + ")";
              list.appendChild(option);
            });
          })
          .catch(function () {});
      }, 150);
    });
  });
})();
// Names for the id filters (data-people="authors|institutions"): /api/v1/people offers the release's authors or
// institutions whose name, or a word of it, begins with what was typed; an option's value is the OpenAlex id, its
// label the name and works. In a list of ids separated by |, the last one is completed and the others kept.
(function () {
  document.querySelectorAll("input[data-people]").forEach(function (input) {
    var list = document.getElementById(input.getAttribute("list"));
    var timer = null, asked = null;
    if (!list) return;
    input.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        var cut = input.value.lastIndexOf("|");
        var kept = cut < 0 ? "" : input.value.slice(0, cut + 1);
        var typed = input.value.slice(cut + 1).trim();
        if (!typed || /^[AaIi][0-9]+$/.test(typed)) return;  // an id is being typed: nothing to look up
        var params = new URLSearchParams({ kind: input.dataset.people, prefix: typed, limit: "10" });
        var url = "/api/v1/people?" + params.toString();
        if (url === asked) return;
        asked = url;
        fetch(url, { headers: { Accept: "application/json" } })
          .then(function (r) { return r.ok ? r.json() : null; })
          .then(function (body) {
            if (!body || url !== asked) return;
            while (list.firstChild) list.removeChild(list.firstChild);
            body.values.forEach(function (v) {
              var option = document.createElement("option");
              option.value = kept + v.id;
              option.label = (v.name || v.id) + " (" + v.works.toLocaleString(document.documentElement.lang) + ")";
              list.appendChild(option);
            });
          })
          .catch(function () {});
      }, 150);
    });
  });
})();
