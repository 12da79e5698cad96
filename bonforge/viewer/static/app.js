// bonforge view: one page, every state in the URL hash (#view?param=...). Text from the store (questions,
// candidates, prompts) only ever reaches the page as text nodes: nothing here parses it as HTML.
"use strict";

const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7", "#9c755f"];
const FOLD = 900; // characters of a long text shown before "show full text"
const main = document.getElementById("main");
// This server's key, written into the page: every API request carries it (other origins cannot read it).
const KEY = document.querySelector('meta[name="bonforge-key"]').content;

// -- DOM and URL helpers ----------------------------------------------------------------------------------

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "style") el.style.cssText = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

function state() {
  const raw = location.hash.slice(1);
  const at = raw.indexOf("?");
  const view = (at < 0 ? raw : raw.slice(0, at)) || "runs";
  return { view, p: new URLSearchParams(at < 0 ? "" : raw.slice(at + 1)) };
}

function link(view, params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") p.set(k, v);
  const q = p.toString();
  return "#" + view + (q ? "?" + q : "");
}

function go(view, params) { location.hash = link(view, params).slice(1); }

function update(changes) {
  const { view, p } = state();
  const params = Object.fromEntries(p);
  go(view, Object.assign(params, changes));
}

async function api(path, params, body) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const init = body === undefined ? { headers: { "X-Bonforge-Key": KEY } }
    : { method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json", "X-Bonforge-Key": KEY } };
  const res = await fetch("/api/" + path + (q.toString() ? "?" + q : ""), init);
  let data;
  try { data = await res.json(); } catch (e) { data = { error: res.status + " " + res.statusText }; }
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}

function exportLinks(params) {
  return h("span", { class: "export" }, "export ",
    ["csv", "json", "parquet"].map((fmt) => {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
      q.set("format", fmt);
      q.set("key", KEY);
      return h("a", { href: "/api/export?" + q, download: "", "data-format": fmt }, fmt);
    }));
}

const pct = (v) => (v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%");
const num = (v, d = 0) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
const kmap = (m) => Object.entries(m || {}).map(([k, v]) => `@${k} ${pct(v)}`).join("  ");
const fmt = (v) => (v === null || v === undefined ? "–" : typeof v === "number" ? num(v, 3) : String(v));
const scoreText = (s) => (s ? (s.status === "ok" ? fmt(s.value) + (s.label ? ` (${s.label})` : "") : s.status) : "–");

function badge(v) {
  if (!v || v.status === null || v.status === undefined) return h("span", { class: "badge none" }, "no verdict");
  return h("span", { class: "badge " + (v.correct ? "ok" : "bad"), "data-status": v.status }, v.status);
}

function bar(rate) {
  return h("span", { class: "bar", title: pct(rate) },
    h("span", { style: `width:${Math.round(100 * (rate || 0))}%` }), h("b", {}, pct(rate)));
}

function teacherColor(legend, name) {
  if (name === "multiple") return "#bbbbbb";
  if (name === "unmatched") return "#ffffff";
  return PALETTE[Math.max(0, legend.indexOf(name)) % PALETTE.length];
}

function nav(run) {
  const r = run ? { run } : {};
  document.querySelector("a.brand").setAttribute("href", link("runs", r));
  const navEl = document.getElementById("nav");
  navEl.replaceChildren(
    h("a", { href: link("runs", r) }, "runs"),
    h("a", { href: link("problems", r) }, "problems"),
    h("a", { href: link("teachers", r) }, "teachers"),
    h("a", { href: link("labels", r) }, "labels"),
    h("a", { href: link("sql", r) }, "sql"));
}

// -- text rendering -------------------------------------------------------------------------------------

// LaTeX made readable as plain text (no renderer ships offline in 300 KB): common macros to Unicode. Shown
// only beside the stored text, never instead of it (the stored text is what the dataset holds).
const TEX = [
  [/\\(?:d|t)?frac\{([^{}]*)\}\{([^{}]*)\}/g, "($1)/($2)"], [/\\sqrt\{([^{}]*)\}/g, "√($1)"],
  [/\\boxed\{([^{}]*)\}/g, "⟦$1⟧"], [/\\text(?:bf|rm|it)?\{([^{}]*)\}/g, "$1"], [/\^\{?2\}?/g, "²"],
  [/\^\{?3\}?/g, "³"], [/\\cdot/g, "·"], [/\\times/g, "×"], [/\\div/g, "÷"], [/\\pm/g, "±"],
  [/\\leq?/g, "≤"], [/\\geq?/g, "≥"], [/\\neq/g, "≠"], [/\\approx/g, "≈"], [/\\pi/g, "π"],
  [/\\infty/g, "∞"], [/\\(?:left|right)/g, ""], [/\\[()[\]]/g, ""], [/\$\$?/g, ""], [/\\[,;!]/g, " "],
  [/\\%/g, "%"], [/\\\$/g, "$"],
];

const LATEX = /\\[a-zA-Z]+|\$\$|\\[()[\]]/; // a macro, $$ or \( \[ : text worth a rendered copy

function readable(text) {
  let out = text;
  for (let i = 0; i < 3; i++) for (const [re, rep] of TEX) out = out.replace(re, rep);
  return out;
}

const PY = /(#[^\n]*)|("""[\s\S]{0,4000}?"""|'''[\s\S]{0,4000}?'''|"(?:\\.|[^"\\\n]){0,2000}"|'(?:\\.|[^'\\\n]){0,2000}')|\b(def|class|return|if|elif|else|for|while|in|not|and|or|import|from|as|with|try|except|finally|raise|lambda|yield|pass|break|continue|None|True|False|is|global|nonlocal|assert|del)\b|\b(\d+(?:\.\d+)?)\b/g;

// Code as text nodes and keyword/string/comment/number spans (the text's characters unchanged).
function colour(code) {
  if (code.length > 50000) return [code];
  const out = [];
  let last = 0;
  for (const m of code.matchAll(PY)) {
    if (m.index > last) out.push(code.slice(last, m.index));
    const cls = m[1] ? "c" : m[2] ? "s" : m[3] ? "k" : "n";
    out.push(h("span", { class: cls }, m[0]));
    last = m.index + m[0].length;
  }
  out.push(code.slice(last));
  return out;
}

function highlight(code) { return h("pre", { class: "code" }, colour(code)); }

// Prose (a statement, an answer, a judge's reply) is never coloured; only its fenced code blocks are (a
// line opening with ``` to a line of ``` alone; a fence never closed stays prose). One pass over the lines.
function prose(text) {
  const pre = h("pre", { class: "prose" });
  let plain = "", code = null; // code: the lines of the block open now
  for (const line of text.split(/(?<=\n)/)) {
    if (code === null) {
      plain += line;
      if (line.startsWith("```") && line.endsWith("\n")) code = "";
    } else if (/^```[ \t]*\n?$/.test(line)) {
      pre.append(plain, h("code", { class: "block" }, colour(code)));
      plain = line;
      code = null;
    } else code += line;
  }
  pre.append(plain + (code ?? ""));
  return pre;
}

// A long text folded to its start, with its full text one click away; a program highlighted, prose not
// (its code blocks are). The text is shown exactly as stored; maths with LaTeX gets a readable copy beside
// it (folded), never in its place.
function textBlock(text, kind) {
  const full = text || "";
  const wrap = h("div", { class: "text" });
  const show = (all) => {
    const shown = all || full.length <= FOLD ? full : full.slice(0, FOLD);
    const body = kind === "code" ? highlight(shown) : prose(shown);
    const kids = [body];
    if (kind === "math" && LATEX.test(shown)) {
      kids.push(h("details", { class: "rendered" }, h("summary", {}, "maths as Unicode (a rendering, not the stored text)"),
        h("pre", { class: "prose" }, readable(shown))));
    }
    if (full.length > FOLD) {
      kids.push(h("button", { class: "fold", onclick: () => show(!all) },
        all ? "fold" : `show full text (${full.length} chars)`));
    }
    wrap.replaceChildren(...kids);
  };
  show(false);
  return wrap;
}

// A trajectory (the candidate's stored messages, JSON) turn by turn from the model's first turn: its text, its
// tool calls (Python code highlighted), each tool's output folded. Anything unreadable: the stored text as is.
function trajectory(stored, kind) {
  let messages;
  try { messages = JSON.parse(stored); } catch (e) { return textBlock(stored, "plain"); }
  if (!Array.isArray(messages)) return textBlock(stored, "plain");
  const first = messages.findIndex((m) => m && m.role === "assistant");
  const calls = messages.reduce((n, m) => n + (m && Array.isArray(m.tool_calls) ? m.tool_calls.length : 0), 0);
  const turns = messages.slice(Math.max(first, 0)).map((m) => {
    if (!m || typeof m !== "object") return null;
    const content = typeof m.content === "string" ? m.content : "";
    if (m.role === "tool") {
      return h("details", { class: "turn tool" }, h("summary", {}, `tool output ${String(m.tool_call_id ?? "")} (${content.length} chars)`),
        h("pre", { class: "prose" }, content));
    }
    const made = (Array.isArray(m.tool_calls) ? m.tool_calls : []).map((c) => {
      const f = (c && c.function) || {};
      let code = null;
      try { const a = JSON.parse(f.arguments); code = a && typeof a.code === "string" ? a.code : null; } catch (e) { code = null; }
      return h("div", { class: "call" }, h("div", { class: "who" }, `calls ${String(f.name ?? "?")} (${String(c && c.id)})`),
        code !== null && f.name === "python" ? highlight(code) : h("pre", { class: "prose" }, String(f.arguments ?? "")));
    });
    return h("div", { class: `turn ${m.role === "assistant" ? "model" : "prompt"}` }, h("div", { class: "who" }, String(m.role)),
      content ? textBlock(content, kind) : null, made);
  });
  return h("div", { class: "trajectory" }, h("div", { class: "facts" },
    `trajectory: ${messages.filter((m) => m && m.role === "assistant").length} turns, ${calls} tool call${calls === 1 ? "" : "s"}`), turns);
}

// Word diff (longest common subsequence over words; lines past a size limit).
function diffTokens(a, b) {
  let x = a.split(/(\s+)/).filter((t) => t);
  let y = b.split(/(\s+)/).filter((t) => t);
  if (x.length * y.length > 4e6) { x = a.split(/(?<=\n)/); y = b.split(/(?<=\n)/); }
  if (x.length * y.length > 4e6) return [["-", a], ["+", b]];
  const n = x.length, m = y.length;
  const dp = new Int32Array((n + 1) * (m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      dp[i * (m + 1) + j] = x[i] === y[j] ? dp[(i + 1) * (m + 1) + j + 1] + 1
        : Math.max(dp[(i + 1) * (m + 1) + j], dp[i * (m + 1) + j + 1]);
    }
  }
  const out = [];
  const push = (op, t) => { if (out.length && out[out.length - 1][0] === op) out[out.length - 1][1] += t; else out.push([op, t]); };
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { push("=", x[i]); i++; j++; }
    else if (dp[(i + 1) * (m + 1) + j] >= dp[i * (m + 1) + j + 1]) push("-", x[i++]);
    else push("+", y[j++]);
  }
  while (i < n) push("-", x[i++]);
  while (j < m) push("+", y[j++]);
  return out;
}

// -- views ----------------------------------------------------------------------------------------------

async function viewRuns(p) {
  const data = await api("runs");
  document.getElementById("store").textContent = data.store;
  if (!data.runs.length) {
    return [h("p", { class: "error" }, `no runs recorded in ${data.store}; run \`bonforge run RECIPE\` first`)];
  }
  const runId = p.get("run") || data.runs[0].run_id;
  const list = h("table", { class: "runs" },
    h("tr", {}, ["run", "recipe", "status", "started", "seconds", "dataset", ""].map((c) => h("th", {}, c))),
    data.runs.map((r) => h("tr", { class: r.run_id === runId ? "sel" : "" },
      h("td", {}, h("a", { href: link("runs", { run: r.run_id }) }, r.run_id)),
      h("td", {}, r.recipe_name, r.kind ? h("small", {}, ` (${r.kind})`) : ""),
      h("td", {}, h("span", { class: "status " + r.status }, r.status)),
      h("td", {}, r.started), h("td", { class: "num" }, num(r.wall_s, 1)),
      h("td", {}, r.dataset_version ? `v${r.dataset_version}` : "–"),
      h("td", {}, r.run_id === runId ? "" : h("a", { href: link("diff", { run: runId, a: r.run_id, b: runId }), class: "diff-link" },
        "diff → selected")))));
  const s = await api("run", { run: runId });
  nav(s.run.run_id);
  const stages = h("table", { class: "stages" },
    h("tr", {}, ["stage", "teacher", "key", "rows", "", "wall s", "compute s"].map((c) => h("th", {}, c))),
    s.stages.map((st) => h("tr", {},
      h("td", {}, st.stage), h("td", {}, st.teacher || ""), h("td", { class: "key" }, (st.key || "").slice(0, 16)),
      h("td", { class: "num" }, st.rows), h("td", {}, h("span", { class: st.cached ? "cached" : "computed" },
        st.cached ? "cached" : "computed")),
      h("td", { class: "num" }, num(st.wall_s, 2)), h("td", { class: "num" }, num(st.compute_s, 2)))));
  const running = s.run.status === "running" ? h("p", { class: "note" }, "this build is running: reload to see stages as they commit") : null;
  return [
    h("h2", {}, "Runs"), list,
    h("h2", {}, `Run ${s.run.run_id} `, h("small", {}, s.run.recipe_name || "")),
    s.run.error ? h("p", { class: "error" }, s.run.error) : null, running,
    h("p", {}, h("a", { href: link("problems", { run: s.run.run_id }) }, "browse its problems →")),
    h("h3", {}, "Stages"), s.stages.length ? stages : h("p", { class: "note" }, "no committed stages yet"),
    h("h3", {}, "Datasets"),
    s.datasets.length ? h("ul", {}, s.datasets.map((d) => h("li", {}, `${d.name || d.kind} v${d.version ?? "?"}`,
      h("small", {}, "  " + d.path)))) : h("p", { class: "note" }, "none"),
    h("h3", {}, "Drop reasons"),
    s.drops.length ? h("table", { class: "drops" }, h("tr", {}, h("th", {}, "reason"), h("th", {}, "problems")),
      s.drops.map((d) => h("tr", {}, h("td", {}, d.reason), h("td", { class: "num" }, d.problems))))
      : h("p", { class: "note" }, "no problem_stats in this run"),
  ];
}

const FILTERS = ["run", "teacher", "min", "max", "kept", "status", "majority", "domain", "q", "sort", "desc", "page"];

async function viewProblems(p) {
  const params = {};
  for (const k of FILTERS) if (p.get(k)) params[k] = p.get(k);
  const data = await api("problems", params);
  params.run = data.run_id;
  nav(params.run);
  if (data.open) return openProblems(data, params);
  const field = (name, el) => h("label", {}, name, el);
  const sel = (name, options, value) => h("select", { name },
    options.map(([v, label]) => h("option", { value: v, selected: v === (value || "") }, label)));
  const form = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const next = { run: params.run, sort: params.sort, desc: params.desc };
    for (const [k, v] of f.entries()) next[k] = v;
    go("problems", next);
  } },
    field("pass rate ≥", h("input", { name: "min", type: "number", step: "0.05", min: 0, max: 1, value: p.get("min") || "" })),
    field("≤", h("input", { name: "max", type: "number", step: "0.05", min: 0, max: 1, value: p.get("max") || "" })),
    field("of teacher", sel("teacher", [["", "all (*)"], ...data.teachers.map((t) => [t, t])], p.get("teacher"))),
    field("keep", sel("kept", [["", "any"], ["kept", "kept"], ["dropped", "dropped"]], p.get("kept"))),
    field("verdict", sel("status", [["", "any"], ...data.statuses.map((s) => [s, s])], p.get("status"))),
    field("majority answer", sel("majority", [["", "any"], ["wrong", "wrong"], ["right", "right"]], p.get("majority"))),
    field("domain", sel("domain", [["", "any"], ...data.domains.map((d) => [d, d])], p.get("domain"))),
    field("search", h("input", { name: "q", type: "search", value: p.get("q") || "", placeholder: "text in the question" })),
    h("button", { type: "submit" }, "apply"));
  const sortBy = params.sort || "problem_id";
  const desc = params.desc === "1";
  const head = (label, key) => h("th", {}, key ? h("a", { href: link("problems", Object.assign({}, params,
    { sort: key, desc: key === sortBy && !desc ? "1" : "", page: "" })), class: key === sortBy ? "sorted" : "" },
    label + (key === sortBy ? (desc ? " ↓" : " ↑") : "")) : label);
  const table = h("table", { class: "problems" },
    h("tr", {}, head("problem", "problem_id"), head("domain", "domain"), head("question"), head("pass rate", "pass_rate"),
      head("per teacher"), head("n", "n"), head("correct", "n_correct"), head("pass@k"), head("majority@k"),
      head("keep", "keep")),
    data.rows.map((r) => h("tr", { "data-problem": r.problem_id },
      h("td", {}, h("a", { href: link("problem", { run: params.run, id: r.problem_id }) }, r.problem_id)),
      h("td", {}, r.domain), h("td", { class: "q" }, r.question), h("td", {}, bar(r.rate)),
      h("td", { class: "per" }, Object.entries(r.teachers || {}).map(([t, rate]) =>
        h("span", { class: "chip", title: t }, `${t}: ${pct(rate)}`))),
      h("td", { class: "num" }, r.n), h("td", { class: "num" }, r.n_correct),
      h("td", { class: "k" }, kmap(r.pass_at_k)), h("td", { class: "k" }, kmap(r.majority_at_k)),
      h("td", {}, r.keep ? h("span", { class: "badge ok" }, "kept") : h("span", { class: "badge bad" }, r.drop_reason || "dropped")))));
  const pager = pagerOf("problems", params, data, "problems");
  const exp = Object.assign({ view: "problems" }, params);
  delete exp.page;
  return [h("h2", {}, "Problems"), form, h("div", { class: "bar-row" }, pager, exportLinks(exp)), table];
}

function pagerOf(view, params, data, what) {
  const page = data.page, pages = Math.max(1, Math.ceil(data.total / data.size));
  return h("div", { class: "pager" },
    h("a", { href: page > 0 ? link(view, Object.assign({}, params, { page: page - 1 || "" })) : null,
      class: page > 0 ? "" : "off" }, "← prev"),
    h("span", { id: "page-info" }, ` page ${page + 1} of ${pages} (${data.total} ${what}) `),
    h("a", { href: page + 1 < pages ? link(view, Object.assign({}, params, { page: page + 1 })) : null,
      class: page + 1 < pages ? "" : "off" }, "next →"));
}

// An open-ended run's requests: no pass rates; each with its candidates and its Best-of-N pick.
function openProblems(data, params) {
  const form = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    go("problems", { run: params.run, q: new FormData(e.target).get("q") });
  } }, h("label", {}, "search", h("input", { name: "q", type: "search", value: params.q || "", placeholder: "text in the request" })),
    h("button", { type: "submit" }, "apply"));
  const table = h("table", { class: "problems open" },
    h("tr", {}, ["problem", "request", "candidates", "Best-of-N pick", "score"].map((c) => h("th", {}, c))),
    data.rows.map((r) => h("tr", { "data-problem": r.problem_id },
      h("td", {}, h("a", { href: link("problem", { run: params.run, id: r.problem_id }) }, r.problem_id)),
      h("td", { class: "q" }, r.question), h("td", { class: "num" }, r.n),
      h("td", {}, r.pick ? h("a", { href: link("problem", { run: params.run, id: r.problem_id, cand: r.pick }) }, r.pick) : "–"),
      h("td", { class: "num" }, r.pick ? `${r.scorer} ${fmt(r.value)}` : "–"))));
  return [h("h2", {}, "Problems ", h("small", {}, "open-ended: scored, not verified")), form,
    h("div", { class: "bar-row" }, pagerOf("problems", params, data, "problems")), table];
}

async function viewTeachers(p) {
  const data = await api("teachers", { run: p.get("run") });
  const run = data.run_id;
  nav(run);
  if (!data.teachers.length) return [h("h2", {}, "Teachers"), h("p", { class: "note" }, "no verdicts in this run")];
  const ks = [...new Set(data.teachers.flatMap((t) => Object.keys(t.pass_at_k || {})))].sort((a, b) => a - b);
  const table = h("table", { class: "teachers" },
    h("tr", {}, ["teacher", "accuracy", ...ks.map((k) => `pass@${k}`), ...ks.map((k) => `majority@${k}`),
      "candidates", "problems", "majority wrong"].map((c) => h("th", {}, c))),
    data.teachers.map((t) => h("tr", { "data-teacher": t.teacher },
      h("td", {}, t.teacher === "*" ? "all teachers" : h("a", { href: link("problems", { run, teacher: t.teacher }) }, t.teacher)),
      h("td", {}, bar(t.accuracy)),
      ks.map((k) => h("td", { class: "num", "data-k": k }, pct((t.pass_at_k || {})[k]))),
      ks.map((k) => h("td", { class: "num" }, pct((t.majority_at_k || {})[k]))),
      h("td", { class: "num" }, t.candidates), h("td", { class: "num" }, t.problems),
      h("td", { class: "num" }, t.teacher === "*" ? h("a", { href: link("problems", { run, majority: "wrong" }) }, t.majority_wrong ?? "–")
        : t.majority_wrong ?? "–"))));
  return [h("h2", {}, "Teachers ", h("small", {}, `run ${run}`)),
    h("p", { class: "note" }, "accuracy: the share of a teacher's candidates verified correct; pass@k and majority@k: the mean over its problems (problem_stats); majority wrong: problems whose most frequent extracted answer is wrong."),
    table];
}

const WAYS = { "": "both ways", we_say_correct: "we say correct, the label wrong",
               label_says_correct: "the label says correct, we do not" };

// The candidates whose published label (an imported pool's) disagrees with our verdict, per teacher and way.
async function viewLabels(p) {
  const params = { run: p.get("run"), teacher: p.get("teacher"), way: p.get("way"), page: p.get("page") };
  const data = await api("labels", params);
  const run = data.run_id;
  nav(run);
  const title = h("h2", {}, "Published labels against our verdicts ", h("small", {}, `run ${run}`));
  if (!data.teachers.length) return [title, h("p", { class: "note" }, "no candidate of this run carries a published label (a pool teacher's `label`)")];
  const here = (changes) => link("labels", Object.assign({}, params, { run, page: "" }, changes));
  const teachers = h("table", { class: "label-teachers" },
    h("tr", {}, ["teacher", "labelled", "disagree"].map((c) => h("th", {}, c))),
    data.teachers.map((t) => h("tr", { "data-teacher": t.teacher },
      h("td", {}, h("a", { href: here({ teacher: t.teacher }), class: t.teacher === params.teacher ? "sorted" : "" }, t.teacher)),
      h("td", { class: "num" }, t.labelled), h("td", { class: "num" }, t.disagree))));
  const ways = h("p", { class: "switch" }, "show ", Object.entries(WAYS).map(([w, text]) =>
    h("a", { href: here({ way: w }), class: w === (params.way || "") ? "sorted" : "", "data-way": w || "both" }, text)),
    params.teacher ? ["  of ", h("b", {}, params.teacher), " ", h("a", { href: here({ teacher: "" }) }, "(all teachers)")] : "");
  const rows = h("table", { class: "label-disagreements", id: "label-disagreements" },
    h("tr", {}, ["problem", "candidate", "teacher", "our verdict", "published label", "answer"].map((c) => h("th", {}, c))),
    data.rows.map((r) => h("tr", { "data-candidate": r.candidate_id },
      h("td", {}, h("a", { href: link("problem", { run, id: r.problem_id }) }, r.problem_id)),
      h("td", {}, h("a", { href: link("problem", { run, id: r.problem_id, labels: "disagree", cand: r.candidate_id }) }, r.candidate_id)),
      h("td", {}, r.teacher), h("td", {}, badge(r)), h("td", {}, r.reference_correct ? "correct" : "wrong"),
      h("td", { class: "ans" }, r.extracted ?? "–"))));
  const pager = pagerOf("labels", Object.assign({}, params, { run }), data, "candidates");
  return [title, h("p", { class: "note" }, "An imported pool's published labels (a pool teacher's `label`) set against our verdicts; a verdict that is no label (sandbox_error, infra_error) never disagrees. The run report names the problems; here are the candidates."),
    teachers, ways, pager, rows];
}

function groupKey(c, by) {
  if (by === "answer") return c.extracted === null || c.extracted === undefined ? "(no answer)" : c.extracted;
  return c.teacher;
}

async function viewProblem(p) {
  const run = p.get("run"), id = p.get("id");
  if (!id) throw new Error("no problem named: open one from the problem list");
  const data = await api("problem", { run, id });
  nav(run);
  const pr = data.problem;
  const kind = pr.domain === "code" || pr.domain === "open" ? pr.domain : "math";
  const open = kind === "open"; // scored, not verified: no verdict, no gold answer, no "correct"
  const imported = new Set(data.imported);
  const labelled = data.candidates.some((c) => c.reference_correct !== null);
  const onlyDisagree = labelled && p.get("labels") === "disagree";
  const by = p.get("group") === "answer" && !open ? "answer" : "teacher";
  const gold = (pr.answer || "").trim().split("\n").filter((l) => l.trim()).pop() || "–";
  const picked = (p.get("diff") || "").split(",").filter((x) => x);
  const focus = p.get("cand");
  const togglePick = (cid) => {
    const next = picked.includes(cid) ? picked.filter((x) => x !== cid) : picked.concat([cid]).slice(-2);
    update({ diff: next.join(",") });
  };
  const pick = (c) => data.bon.find((b) => b.pool === "*" && b.candidate_id === c.candidate_id);
  const outcome = {
    math: (c) => [h("dt", {}, "answer"), h("dd", { class: "ans" }, c.extracted ?? "–"), h("dt", {}, "gold"), h("dd", { class: "ans" }, gold)],
    code: (c) => [h("dt", {}, "tests"), h("dd", {}, `${num(c.tests_passed)} / ${num(c.tests_total)}`)],
    open: (c) => (c.scores || []).map((s) => [h("dt", {}, s.scorer), h("dd", { class: "score", "data-scorer": s.scorer }, scoreText(s))]),
  }[kind];
  // A published label beside our verdict (imported pools): whether they disagree.
  const label = (c) => (c.reference_correct === null ? null : [h("dt", {}, "published label"),
    h("dd", { class: "label" }, c.reference_correct ? "correct" : "wrong", c.label_disagrees ? h("span", { class: "badge bad disagree" }, "disagrees with our verdict") : "")]);
  // Imported candidates were not sampled here: no finish reason, tokens or latency to show.
  const origin = (c) => (imported.has(c.teacher) ? [h("dt", {}, "origin"), h("dd", { class: "origin" }, "imported")] : [
    h("dt", {}, "finish"), h("dd", {}, c.finish_reason ?? "–"),
    h("dt", {}, "tokens"), h("dd", {}, `${num(c.prompt_tokens)} + ${num(c.completion_tokens)}`)]);
  const mark = (c) => (open ? (pick(c) ? h("span", { class: "badge ok bon" }, `Best-of-N pick: ${pick(c).scorer} ${fmt(pick(c).value)}`) : null) : badge(c));
  const card = (c) => h("div", { class: "cand" + (c.candidate_id === focus ? " focus" : "") + (c.label_disagrees ? " disagree" : ""),
    id: "c-" + c.candidate_id, "data-candidate": c.candidate_id },
    h("div", { class: "head" },
      h("a", { href: link("problem", { run, id, group: p.get("group"), diff: p.get("diff"), labels: p.get("labels"), cand: c.candidate_id }),
        class: "cid" }, `${c.teacher} #${c.sample_index}`), mark(c),
      h("label", { class: "pick" }, h("input", { type: "checkbox", checked: picked.includes(c.candidate_id),
        onchange: () => togglePick(c.candidate_id) }), "diff")),
    h("dl", {}, outcome(c), label(c), origin(c),
      open || c.latency_ms === null ? null : [h("dt", {}, "verified in"), h("dd", {}, num(c.latency_ms, 1) + " ms")]),
    c.detail ? h("details", { class: "detail" }, h("summary", {}, "error detail"), h("pre", {}, c.detail)) : null,
    c.reasoning ? h("details", { class: "reasoning" }, h("summary", {}, `reasoning (${c.reasoning.length} chars)`),
      textBlock(c.reasoning, "plain")) : null,
    c.messages ? trajectory(c.messages, kind === "math" ? "math" : "plain")
      : textBlock(c.text, kind === "code" ? "code" : kind === "math" ? "math" : "plain"));
  const groups = new Map();
  for (const c of data.candidates.filter((x) => !onlyDisagree || x.label_disagrees)) {
    const k = groupKey(c, by);
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(c);
  }
  const sections = [...groups.entries()].sort((a, b) => b[1].length - a[1].length || String(a[0]).localeCompare(String(b[0])))
    .map(([k, cs]) => h("section", { class: "group", "data-group": k, style: `flex-basis:min(100%, ${cs.length * 360}px)` },
      h("h3", {}, `${by === "answer" ? "answer" : "teacher"} ${k} `,
        h("small", {}, `${cs.length} candidate${cs.length === 1 ? "" : "s"}`, open ? "" : `, ${cs.filter((c) => c.correct).length} correct`)),
      h("div", { class: "grid" }, cs.map(card))));
  let diff = null;
  if (picked.length === 2) {
    const [a, b] = picked.map((cid) => data.candidates.find((c) => c.candidate_id === cid));
    if (a && b) {
      diff = h("section", { class: "diff", id: "diff" }, h("h3", {}, "word diff ", h("small", {}, `${a.candidate_id} → ${b.candidate_id}`)),
        h("pre", {}, diffTokens(a.text || "", b.text || "").map(([op, t]) =>
          op === "=" ? t : h(op === "+" ? "ins" : "del", {}, t))));
    }
  }
  const stats = h("table", { class: "stats" },
    h("tr", {}, ["teacher", "n", "correct", "pass rate", "pass@k", "majority@k", "keep"].map((c) => h("th", {}, c))),
    data.stats.map((s) => h("tr", {}, h("td", {}, s.teacher), h("td", { class: "num" }, s.n),
      h("td", { class: "num" }, s.n_correct), h("td", {}, bar(s.pass_rate)), h("td", { class: "k" }, kmap(s.pass_at_k)),
      h("td", { class: "k" }, kmap(s.majority_at_k)),
      h("td", {}, s.teacher === "*" ? (s.keep ? "kept" : [s.drop_reason || "dropped", s.drop_detail ? h("small", {}, ` ${s.drop_detail}`) : null]) : ""))));
  const all = data.stats.find((s) => s.teacher === "*");
  const strength = all && all.suite_strength != null ? h("p", { class: "strength" }, "test-suite strength: ",
    bar(all.suite_strength), h("small", {}, ` its tests reject ${Math.round(all.suite_strength * all.n_known_wrong)} of ${all.n_known_wrong} known-wrong candidates`)) : null;
  const links = [];
  if (data.has.genselect) links.push(h("a", { href: link("genselect", { run, id }) }, `GenSelect prompts (${data.has.genselect})`));
  if (data.has.fusion) links.push(h("a", { href: link("fusion", { run, id }) }, "FusioN"));
  if (data.has.open) links.push(h("a", { href: link("open", { run, id }) }, "Scores, Best-of-N and judge games"));
  const groupSwitch = open ? null : h("span", { class: "switch" }, "group by ",
    ["teacher", "answer"].map((g) => h("a", { href: link("problem", { run, id, group: g === "teacher" ? "" : g, diff: p.get("diff"), labels: p.get("labels") }),
      class: g === by ? "sorted" : "", "data-group-by": g }, g)));
  const labelSwitch = labelled ? h("span", { class: "switch" }, "  published labels: ",
    [["", "all candidates"], ["disagree", "where they disagree with our verdicts"]].map(([v, text]) => h("a", {
      href: link("problem", { run, id, group: p.get("group"), diff: p.get("diff"), labels: v }),
      class: v === (onlyDisagree ? "disagree" : "") ? "sorted" : "", "data-labels": v || "all" }, text))) : null;
  return [
    h("h2", {}, `Problem ${pr.problem_id} `, h("small", {}, `${pr.source || ""} · ${pr.domain || ""}`)),
    h("p", { class: "links" }, links, exportLinks({ view: "problem", run, id })),
    h("div", { class: "question" }, textBlock(pr.question, kind === "math" ? "math" : "plain")),
    open && !pr.answer ? null : h("details", { class: "gold" },
      h("summary", {}, { code: "reference solution / tests", open: "reference answer" }[kind] || `gold answer: ${gold}`),
      textBlock(pr.answer || "", kind === "open" ? "plain" : kind), pr.tests ? textBlock(pr.tests, "plain") : null),
    data.stats.length ? stats : null, strength,
    open ? [h("h3", {}, "Best-of-N"), data.bon.length ? bonTable(data.bon, run, id) : h("p", { class: "note" }, "no Best-of-N picks for this problem in this run")] : null,
    diff, h("p", {}, groupSwitch, labelSwitch, h("small", {}, "  tick two candidates' “diff” boxes to compare them word by word")),
    sections.length ? h("div", { class: "groups" }, sections)
      : h("p", { class: "note" }, onlyDisagree ? "no candidate of this problem disagrees with its published label" : "no candidates for this problem in this run"),
  ];
}

function promptText(text, labels) {
  // The prompt with the blocks of the label's candidates marked (blocks start at "### Candidate <i>").
  const pre = h("pre", { class: "prompt" });
  const parts = text.split(/(?=^### Candidate \d+)/m);
  for (const part of parts) {
    const m = /^### Candidate (\d+)/.exec(part);
    pre.append(m && labels.includes(Number(m[1])) ? h("mark", { class: "label" }, part) : document.createTextNode(part));
  }
  return pre;
}

async function viewGenselect(p) {
  const run = p.get("run"), id = p.get("id");
  const data = await api("genselect", { run, id });
  nav(run);
  if (!data.prompts.length) return [h("h2", {}, `GenSelect · ${id}`), h("p", { class: "note" }, "no prompt was built from this problem")];
  const at = Math.min(Number(p.get("prompt") || 0), data.prompts.length - 1);
  const pr = data.prompts[at];
  const tabs = h("div", { class: "tabs" }, data.prompts.map((q, i) => h("a", { href: link("genselect", { run, id, prompt: i || "" }),
    class: i === at ? "sorted" : "" }, `prompt ${q.prompt_index}`)));
  const cands = h("table", { class: "pcands" },
    h("tr", {}, h("th", {}, "index"), h("th", {}, "candidate"), h("th", {}, "label")),
    pr.candidate_ids.map((cid, i) => h("tr", { class: pr.correct_indices.includes(i) ? "label" : "" },
      h("td", { class: "num" }, i),
      h("td", {}, h("a", { href: link("problem", { run, id, cand: cid }) }, cid)),
      h("td", {}, pr.correct_indices.includes(i) ? h("span", { class: "badge ok" }, "correct") : ""))));
  const judged = pr.judgments.length ? h("table", { class: "judged" },
    h("tr", {}, ["run", "judgment", "parsed", "correct", "response"].map((c) => h("th", {}, c))),
    pr.judgments.map((j) => h("tr", {}, h("td", { class: "num" }, j.run),
      h("td", { class: "num" }, j.skipped ? "skipped" : j.judgment ?? "–"), h("td", {}, String(j.parsed)),
      h("td", {}, h("span", { class: "badge " + (j.correct ? "ok" : "bad") }, String(j.correct))),
      h("td", {}, textBlock(j.response || "", "plain")))))
    : h("p", { class: "note" }, data.selector_eval ? "the selector did not judge this prompt" : "no selector_eval in this run");
  return [
    h("h2", {}, "GenSelect · ", h("a", { href: link("problem", { run, id }) }, id)), tabs,
    h("p", {}, `${pr.n_candidates} candidates, label ${JSON.stringify(pr.correct_indices)}, ${pr.n_tokens} tokens (${pr.token_counter}) `,
      exportLinks({ view: "genselect", run, id })),
    cands, h("h3", {}, "Selector judgments"), judged, h("h3", {}, "Prompt"), promptText(pr.prompt, pr.correct_indices),
  ];
}

async function viewFusion(p) {
  const run = p.get("run"), id = p.get("id");
  const data = await api("fusion", { run, id });
  nav(run);
  const legend = data.legend;
  const swatch = (name) => h("span", { class: "swatch", style: `background:${teacherColor(legend, name)}` });
  const f = data.fusion;
  const pool = h("table", { class: "pool" },
    h("tr", {}, ["position", "teacher", "candidate", "verdict", "answer"].map((c) => h("th", {}, c))),
    data.pool.map((c, i) => h("tr", {}, h("td", { class: "num" }, i), h("td", {}, swatch(c.teacher), c.teacher),
      h("td", {}, h("a", { href: link("problem", { run, id, cand: c.candidate_id }) }, c.candidate_id)),
      h("td", {}, badge(c)), h("td", { class: "ans" }, c.extracted ?? "–"))));
  const fused = h("pre", { class: "fused" }, data.segments.map((s) =>
    h("span", { class: "seg", "data-owner": s.owner, title: s.owner,
      style: `background:${teacherColor(legend, s.owner)}33;border-bottom:3px solid ${teacherColor(legend, s.owner)}` }, s.text)));
  const cmp = h("table", { class: "cmp" },
    h("tr", {}, ["fused", "oracle (pass@N)", "majority", "random", "GenSelect"].map((c) => h("th", {}, c))),
    h("tr", {}, h("td", {}, badge({ correct: f.fused_correct, status: f.fused_status })), h("td", {}, pct(f.oracle)),
      h("td", {}, pct(f.majority)), h("td", {}, pct(f.random)), h("td", {}, pct(f.genselect))));
  const chars = h("ul", { class: "legend" }, legend.map((name) => h("li", { "data-owner": name }, swatch(name),
    `${name}: ${f.teacher_chars[name] || 0} chars`)));
  return [
    h("h2", {}, "FusioN · ", h("a", { href: link("problem", { run, id }) }, id)),
    h("p", {}, exportLinks({ view: "fusion", run, id })), cmp, h("h3", {}, "Pool"), pool,
    h("h3", {}, "Fused answer by contributing teacher"), chars, fused,
  ];
}


// A problem's Best-of-N picks (all teachers first, then each teacher's pool), each pick linked to its card.
function bonTable(bon, run, id) {
  return h("table", { class: "open-bon" },
    h("tr", {}, ["pool", "scorer", "candidates", "eligible", "pick", "value", "runner-up", "tie", "left out"].map((c) => h("th", {}, c))),
    bon.map((b) => h("tr", { "data-pool": b.pool }, h("td", {}, b.pool), h("td", {}, b.scorer), h("td", { class: "num" }, b.n_candidates),
      h("td", { class: "num" }, b.n_eligible),
      h("td", {}, b.candidate_id ? h("a", { href: link("problem", { run, id, cand: b.candidate_id }) }, b.candidate_id) : "–"),
      h("td", { class: "num" }, fmt(b.value)), h("td", { class: "num" }, fmt(b.runner_up)), h("td", {}, b.tie ? "tie" : ""),
      h("td", {}, Object.entries(b.filtered).map(([k, n]) => `${k}: ${n}`).join(", ")))));
}

async function viewOpen(p) {
  // An open-ended problem: each candidate with its scores, the Best-of-N picks, the fused answer beside
  // Best-of-N on its pool, and the pairwise games with both orders side by side.
  const run = p.get("run"), id = p.get("id");
  const data = await api("open", { run, id });
  nav(run);
  const scorers = [...new Set(data.candidates.flatMap((c) => c.scores.map((s) => s.scorer)))].sort();
  const cands = h("table", { class: "open-scores" },
    h("tr", {}, ["candidate", "teacher", ...scorers, "Best-of-N"].map((c) => h("th", {}, c))),
    data.candidates.map((c) => h("tr", { "data-candidate": c.candidate_id, class: c.bon ? "label" : "" },
      h("td", {}, h("a", { href: link("problem", { run, id, cand: c.candidate_id }) }, c.candidate_id)),
      h("td", {}, c.teacher),
      scorers.map((name) => h("td", { class: "num" }, scoreText(c.scores.find((s) => s.scorer === name)))),
      h("td", {}, c.bon ? h("span", { class: "badge ok" }, "pick") : ""))));
  const bon = bonTable(data.bon, run, id);
  const f = data.fusion;
  const fused = f ? h("table", { class: "open-fusion" },
    h("tr", {}, ["scorer", "fused", "Best-of-N (pool)", "pool best", "pool mean"].map((c) => h("th", {}, c))),
    Object.keys(f.pool_max).sort().map((s) => h("tr", {},
      h("td", {}, s + (s === f.scorer ? " (selection scorer)" : "")), h("td", { class: "num" }, fmt(f.fused_values[s])),
      h("td", { class: "num" }, fmt(f.bon_values[s])), h("td", { class: "num" }, fmt(f.pool_max[s])),
      h("td", { class: "num" }, fmt(f.pool_mean[s])))))
    : h("p", { class: "note" }, "no fused answer for this problem in this run");
  const order = (g) => (g.game ? "contender shown first (A)" : "contender shown second (B)");
  const pairs = data.games.length ? data.games.map((pr) => h("section", { class: "game", "data-pair": `${pr.contender} vs ${pr.baseline}` },
    h("h4", {}, `${pr.contender} vs ${pr.baseline}: `, h("span", { class: "badge " + (pr.outcome === "win" ? "ok" : pr.outcome === "loss" ? "bad" : "") }, pr.outcome)),
    h("div", { class: "grid" }, pr.games.map((g) => h("div", { class: "cand", "data-game": g.game },
      h("div", { class: "head" }, order(g), ": ", h("b", {}, g.label || "no label"), ` → contender ${fmt(g.contender_score)}`),
      textBlock(g.response || "", "plain"))))))
    : [h("p", { class: "note" }, "no pairwise games for this problem in this run")];
  return [
    h("h2", {}, "Open-ended · ", h("a", { href: link("problem", { run, id }) }, id)),
    h("div", { class: "question" }, textBlock(data.problem.question, "plain")),
    h("h3", {}, "Candidates and scores"), cands, h("h3", {}, "Best-of-N"), bon,
    h("h3", {}, "Fused answer beside Best-of-N on its pool"), fused, h("h3", {}, "Pairwise judge games (both orders)"), pairs,
  ];
}

async function viewSql(p) {
  const run = p.get("run") || "";
  nav(run);
  const query = p.get("q") || "SELECT teacher, count(*) AS n, avg(correct::INT) AS accuracy FROM verdicts GROUP BY teacher ORDER BY teacher";
  const box = h("textarea", { id: "sql", rows: 5, spellcheck: "false" }, query);
  const page = Number(p.get("page") || 0);
  const command = `bonforge sql ${shellQuote(query)}` + (run ? ` --run ${run}` : "");
  const cmdBox = h("input", { id: "sql-command", readonly: true, value: command });
  const copy = h("button", { type: "button", onclick: async () => {
    cmdBox.select();
    try { await navigator.clipboard.writeText(command); copy.textContent = "copied"; } catch (e) { copy.textContent = "selected: press Ctrl-C"; }
  } }, "copy as bonforge sql command");
  const out = [h("h2", {}, "SQL"),
    h("p", { class: "note" }, "One read-only SELECT over the run's views (problems, candidates, verdicts, problem_stats, genselect, ...; runs, run_stages)."),
    h("form", { onsubmit: (e) => { e.preventDefault(); update({ q: box.value, page: "" }); } }, box,
      h("div", {}, h("button", { type: "submit", id: "run-sql" }, "run"), " ", copy, " ", cmdBox))];
  if (!p.get("q")) return out;
  let res;
  try {
    res = await api("sql", {}, { sql: query, run: run || null, page });
  } catch (e) {
    out.push(h("p", { class: "error", id: "sql-error" }, "error: " + e.message));
    return out;
  }
  const pages = Math.max(1, Math.ceil(res.total / res.size));
  out.push(h("div", { class: "bar-row" },
    h("div", { class: "pager" },
      h("a", { href: page > 0 ? link("sql", { run, q: query, page: page - 1 || "" }) : null, class: page > 0 ? "" : "off" }, "← prev"),
      h("span", { id: "page-info" }, ` page ${page + 1} of ${pages} (${res.total} rows${res.capped ? ", capped" : ""}) `),
      h("a", { href: page + 1 < pages ? link("sql", { run, q: query, page: page + 1 }) : null, class: page + 1 < pages ? "" : "off" }, "next →")),
    exportLinks({ view: "sql", run, q: query })));
  out.push(h("table", { class: "result", id: "sql-result" }, h("tr", {}, res.columns.map((c) => h("th", {}, c))),
    res.rows.map((r) => h("tr", {}, res.columns.map((c) => h("td", {},
      c === "problem_id" && typeof r[c] === "string" ? h("a", { href: link("problem", { run: res.run_id, id: r[c] }) }, r[c])
        : cell(r[c])))))));
  return out;
}

function cell(v) {
  if (v === null || v === undefined) return "NULL";
  const s = typeof v === "object" ? JSON.stringify(v) : String(v);
  return s.length > 300 ? s.slice(0, 297) + "..." : s;
}

function shellQuote(s) { return "'" + s.replace(/'/g, "'\\''") + "'"; }

// -- the router -----------------------------------------------------------------------------------------

const VIEWS = { runs: viewRuns, problems: viewProblems, problem: viewProblem, genselect: viewGenselect,
                fusion: viewFusion, open: viewOpen, teachers: viewTeachers, labels: viewLabels, sql: viewSql, diff: viewDiff };
let rendering = 0;

// Every view's URL names its run: a link without one gets the run the store opens by default (the latest
// that succeeded), written into the address, so that a link copied now shows the same run later.
async function pinRun() {
  const { view, p } = state();
  if (p.get("run")) return;
  try {
    const data = await api("run");
    p.set("run", data.run.run_id);
    history.replaceState(null, "", location.pathname + location.search + link(view, Object.fromEntries(p)));
  } catch (e) { /* no runs (or none readable): the view says so */ }
}

async function render() {
  const ticket = ++rendering;
  await pinRun();
  if (ticket !== rendering) return;
  const { view, p } = state();
  const fn = VIEWS[view];
  let kids;
  try {
    if (!fn) throw new Error(`unknown view ${view}`);
    kids = await fn(p);
  } catch (e) {
    kids = [h("p", { class: "error", id: "error" }, "error: " + e.message)];
  }
  if (ticket !== rendering) return;
  main.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false));
  main.dataset.view = view;
  main.dataset.ready = String(ticket);
  const focus = p.get("cand");
  const target = focus && document.getElementById("c-" + focus);
  if (target) target.scrollIntoView({ block: "center" });
}

// A URL opened with ?run=ID (as `bonforge view --run` prints it) starts on that run.
const startRun = new URLSearchParams(location.search).get("run");
if (!location.hash && startRun) history.replaceState(null, "", "/" + link("runs", { run: startRun }));
window.addEventListener("hashchange", render);
render();
