// The #diff view (?a=RUN&b=RUN[&stage=verdicts|scores][&teacher=NAME]): the same candidates judged in two runs,
// as `bonforge diff` prints them (GET /api/diff). Loaded before app.js, whose helpers (h, link, api, nav, pct,
// badge, bar) it calls once the page runs; every value from the store reaches the page as a text node.
"use strict";

async function viewDiff(p) {
  const a = p.get("a"), b = p.get("b");
  if (!a || !b) throw new Error("a diff names two runs: #diff?a=RUN&b=RUN");
  const d = await api("diff", { a, b, stage: p.get("stage"), teacher: p.get("teacher") });
  nav(d.b.run_id);
  const run = (r) => h("a", { href: link("runs", { run: r.run_id }) }, r.run_id);
  const kappa = (k) => (k === null ? "undefined (one label only)" : k.toFixed(4));
  const rows = [...new Set(d.confusion.map((c) => c.a))].sort();
  const cols = [...new Set(d.confusion.map((c) => c.b))].sort();
  const count = (x, y) => (d.confusion.find((c) => c.a === x && c.b === y) || { n: 0 }).n;
  const matrix = h("table", { class: "confusion", id: "confusion" },
    h("tr", {}, h("th", {}, "A \\ B"), cols.map((y) => h("th", {}, y))),
    rows.map((x) => h("tr", {}, h("th", {}, x), cols.map((y) => h("td", {
      class: "num " + (x === y ? "same" : count(x, y) ? "moved" : ""), "data-a": x, "data-b": y }, count(x, y))))));
  const side = (v) => (d.stage === "verdicts" ? badge(v)
    : [h("span", { class: "badge" }, v.status), ` ${v.value ?? "–"}`, v.label ? ` ${v.label}` : ""]);
  const flips = h("table", { class: "flips", id: "flips" },
    h("tr", {}, ["problem", "candidate", d.stage === "scores" ? "scorer" : null, "teacher", "A", "B"]
      .filter((c) => c).map((c) => h("th", {}, c))),
    d.flips.map((f) => h("tr", { "data-candidate": f.candidate_id },
      h("td", {}, h("a", { href: link("problem", { run: d.b.run_id, id: f.problem_id }) }, f.problem_id)),
      h("td", { class: "key" }, f.candidate_id), d.stage === "scores" ? h("td", {}, f.scorer) : null,
      h("td", {}, f.teacher),
      h("td", {}, h("a", { href: link("problem", { run: d.a.run_id, id: f.problem_id, cand: f.candidate_id }) }, side(f.a))),
      h("td", {}, h("a", { href: link("problem", { run: d.b.run_id, id: f.problem_id, cand: f.candidate_id }) }, side(f.b))))));
  const teachers = h("table", { class: "teachers" }, h("tr", {}, ["teacher", "matched", "flipped"].map((c) => h("th", {}, c))),
    d.teachers.map((t) => h("tr", {}, h("td", {}, h("a", { href: link("diff", { run: d.b.run_id, a, b, stage: d.stage, teacher: t.teacher }) }, t.teacher)),
      h("td", { class: "num" }, t.matched), h("td", { class: "num" }, t.flipped))));
  const out = [
    h("h2", {}, `${d.stage}: `, run(d.a), " → ", run(d.b), h("small", {}, ` ${d.a.recipe || ""} → ${d.b.recipe || ""}`,
      d.teacher ? `, teacher ${d.teacher}` : "")),
    h("p", { id: "diff-summary" }, `matched ${d.matched} rows (only in A ${d.only_a}, only in B ${d.only_b}); `,
      h("b", {}, `flipped ${d.flipped}`)),
    h("ul", { class: "agreement" }, Object.entries(d.agreement).map(([what, v]) =>
      h("li", { "data-agreement": what }, `${what}: ${pct(v.observed)} agree, Cohen's kappa ${kappa(v.kappa)}`))),
    h("h3", {}, "Statuses (rows: A, columns: B)"), matrix,
    d.teachers.length > 1 || d.teacher ? [h("h3", {}, "By teacher"), teachers] : null,
    h("h3", {}, "Flips ", h("small", {}, `the first ${d.flips.length} of ${d.flipped} by key`)),
    d.flips.length ? flips : h("p", { class: "note" }, "no flips"),
  ];
  const pr = d.problems;
  if (pr) {
    out.push(h("h3", {}, "Problems ", h("small", {}, `${pr.compared} compared, pass rate changed in ${pr.pass_rate_changed}, ` +
      `kept ${pr.kept_a} → ${pr.kept_b} (${pr.kept_to_dropped} now dropped, ${pr.dropped_to_kept} now kept)`)));
    const keep = (k, why) => (k ? "kept" : why || "dropped");
    out.push(h("table", { class: "problem-changes", id: "problem-changes" },
      h("tr", {}, ["problem", "pass rate A", "pass rate B", "A", "B"].map((c) => h("th", {}, c))),
      pr.changed.map((r) => h("tr", {},
        h("td", {}, h("a", { href: link("problem", { run: d.b.run_id, id: r.problem_id }) }, r.problem_id)),
        h("td", {}, bar(r.pass_rate_a)), h("td", {}, bar(r.pass_rate_b)),
        h("td", {}, keep(r.keep_a, r.drop_reason_a)), h("td", {}, keep(r.keep_b, r.drop_reason_b))))));
  }
  return out;
}
