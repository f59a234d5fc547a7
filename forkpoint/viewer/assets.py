"""The viewer's style sheet and script, inlined by :func:`forkpoint.html.render`.

The script reads the JSON of ``<script type="application/json" id="forkpoint-data">`` (see
:func:`forkpoint.html.view_model`) and builds the page with DOM nodes and text nodes only (never
``innerHTML``). It sets no ``style`` attribute either (the page's Content-Security-Policy allows only
the hashed style sheet): positions are set through the CSSOM.
"""

CSS = r"""
:root {
  --bg: #f6f7f9; --panel: #ffffff; --ink: #1f2430; --muted: #6b7280; --line: #e3e6eb; --soft: #f1f3f6;
  --model: #4f46e5; --model-bg: #eef0ff; --tool: #b45309; --tool-bg: #fff5e6;
  --cp: #047857; --cp-bg: #e8f7f0; --note: #475569; --note-bg: #f1f5f9; --end: #374151;
  --override: #ea580c; --override-bg: #fff1e8; --live: #9333ea; --live-bg: #f6edff;
  --bad: #dc2626; --bad-bg: #fdecec; --good: #15803d; --good-bg: #e9f8ee; --warn: #a16207; --warn-bg: #fef7e0;
  --code: ui-monospace, SFMono-Regular, "SF Mono", Menlo, Consolas, "Liberation Mono", monospace;
  --radius: 10px;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0f1218; --panel: #171b23; --ink: #e6e8ee; --muted: #9aa3b2; --line: #2a303c; --soft: #1e232d;
    --model: #a5b4fc; --model-bg: #232a4a; --tool: #fbbf24; --tool-bg: #3a2c12; --cp: #6ee7b7; --cp-bg: #12342a;
    --note: #cbd5e1; --note-bg: #222a36; --end: #d1d5db; --override: #fb923c; --override-bg: #3b2213;
    --live: #d8b4fe; --live-bg: #2f1d44; --bad: #f87171; --bad-bg: #3d1b1b; --good: #4ade80; --good-bg: #15301f;
    --warn: #facc15; --warn-bg: #3a3213;
  }
}
* { box-sizing: border-box; }
html { background: var(--bg); }
body { margin: 0; color: var(--ink); font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
code, pre, .mono { font-family: var(--code); font-size: 12.5px; }
pre { margin: 0; white-space: pre-wrap; word-break: break-word; }
a { color: var(--model); }
button, select { font: inherit; color: inherit; }
.wrap { max-width: 1180px; margin: 0 auto; padding: 20px 24px 60px; }
.noscript { padding: 2em; }
.muted { color: var(--muted); }
.small { font-size: 12px; }

/* header */
.hero { background: var(--panel); border: 1px solid var(--line); border-radius: var(--radius); padding: 18px 22px; }
.brand { display: flex; align-items: center; gap: 10px; color: var(--muted); font-size: 12px; letter-spacing: .06em; text-transform: uppercase; }
.brand b { color: var(--model); letter-spacing: .02em; font-size: 13px; }
.hero h1 { margin: 6px 0 10px; font-size: 22px; font-weight: 650; display: flex; flex-wrap: wrap; align-items: baseline; gap: 10px; }
.hero h1 code { font-size: 15px; color: var(--muted); font-weight: 500; }
.chips { display: flex; flex-wrap: wrap; gap: 6px; margin-bottom: 12px; }
.chip { display: inline-flex; align-items: center; gap: 4px; border-radius: 999px; padding: 1px 10px; font-size: 12px; font-weight: 600; border: 1px solid transparent; background: var(--soft); color: var(--muted); white-space: nowrap; }
.chip.good { background: var(--good-bg); color: var(--good); }
.chip.bad { background: var(--bad-bg); color: var(--bad); }
.chip.warn { background: var(--warn-bg); color: var(--warn); }
.chip.whatif { background: var(--override-bg); color: var(--override); }
.meta { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0; font-size: 13px; }
.meta dt { color: var(--muted); }
.meta dd { margin: 0; min-width: 0; overflow-wrap: anywhere; }
.stats { display: grid; grid-template-columns: repeat(auto-fit, minmax(130px, 1fr)); gap: 10px; margin-top: 16px; }
.stat { background: var(--soft); border-radius: 8px; padding: 8px 12px; }
.stat .v { font-size: 18px; font-weight: 650; font-variant-numeric: tabular-nums; }
.stat .k { color: var(--muted); font-size: 12px; }

/* what-if panel */
.whatif-panel { margin-top: 16px; border: 1px solid var(--override); background: var(--override-bg); border-radius: var(--radius); padding: 14px 18px; }
.whatif-panel h2 { margin: 0 0 6px; font-size: 15px; color: var(--override); }
.divergence { margin-top: 10px; border-left: 4px solid var(--bad); background: var(--panel); border-radius: 6px; padding: 10px 14px; }
.divergence.none { border-left-color: var(--good); }
.divergence b { color: var(--bad); }
.divergence.none b { color: var(--good); }
.changes { width: 100%; border-collapse: collapse; margin-top: 8px; font-size: 12.5px; table-layout: fixed; }
.changes th, .changes td { text-align: left; vertical-align: top; border-top: 1px solid var(--line); padding: 4px 6px; }
.changes th { color: var(--muted); font-weight: 600; }
.changes col.c-path { width: 30%; }
.changes td pre { max-height: 9em; overflow: auto; }
.changes .exp { color: var(--bad); }
.changes .act { color: var(--good); }
.changes tr.ignored .exp, .changes tr.ignored .act { color: var(--muted); }

/* overview */
.sweep-panel { margin-top: 16px; border: 1px solid var(--line, #d0d7de); border-radius: var(--radius); padding: 14px 18px; }
.sweep-panel h2 { margin: 0 0 6px; font-size: 15px; }
.sweep-chart { display: flex; align-items: flex-end; gap: 10px; height: 170px; margin-top: 10px; padding-bottom: 2px; border-bottom: 1px solid var(--end); overflow-x: auto; }
.sweep-col { display: flex; flex-direction: column; align-items: center; justify-content: flex-end; min-width: 54px; height: 100%; cursor: pointer; background: none; border: 0; padding: 0; color: inherit; font: inherit; }
.sweep-plot { position: relative; width: 26px; height: 120px; }
.sweep-bar { position: absolute; bottom: 0; left: 0; right: 0; background: var(--good); border-radius: 3px 3px 0 0; }
.sweep-col.dead .sweep-bar { background: var(--bad); min-height: 2px; }
.sweep-col.unmeasured .sweep-bar { background: var(--note); min-height: 2px; }
.sweep-ci { position: absolute; left: 50%; width: 0; border-left: 2px solid var(--end); }
.sweep-col .lbl { font-size: 11.5px; white-space: nowrap; }
.sweep-col.turning .lbl.cp { color: var(--bad); font-weight: 650; }
.section-title { display: flex; align-items: baseline; gap: 10px; margin: 22px 0 8px; font-size: 15px; font-weight: 650; }
.section-title .muted { font-weight: 400; font-size: 12.5px; }
.overview { background: var(--panel); border: 1px solid var(--line); border-radius: var(--radius); padding: 12px 16px 6px; }
.lane { display: grid; grid-template-columns: 86px 1fr; align-items: center; height: 24px; }
.lane-label { color: var(--muted); font-size: 12px; }
.track { position: relative; height: 16px; background: var(--soft); border-radius: 4px; }
.blk { position: absolute; top: 2px; height: 12px; min-width: 3px; border-radius: 3px; cursor: pointer; border: 0; padding: 0; }
.blk.model_call { background: var(--model); }
.blk.tool_call { background: var(--tool); }
.blk.checkpoint, .blk.note { top: 3px; width: 10px; height: 10px; min-width: 0; margin-left: -5px; transform: rotate(45deg); border-radius: 2px; }
.blk.checkpoint { background: var(--cp); }
.blk.note { background: var(--note); }
.blk.src-override { outline: 2px solid var(--override); outline-offset: 1px; }
.blk.src-live { outline: 2px dashed var(--live); outline-offset: 1px; }
.blk.diverged { outline: 2px solid var(--bad); outline-offset: 2px; }
.blk:hover, .blk:focus-visible { filter: brightness(1.25); outline: 2px solid var(--ink); }
.axis { position: relative; height: 20px; margin-left: 86px; color: var(--muted); font-size: 11px; font-variant-numeric: tabular-nums; }
.tick { position: absolute; top: 3px; transform: translateX(-50%); white-space: nowrap; }
.tick::before { content: ""; position: absolute; left: 50%; top: -4px; height: 4px; border-left: 1px solid var(--line); }

/* toolbar */
.toolbar { position: sticky; top: 0; z-index: 5; display: flex; flex-wrap: wrap; align-items: center; gap: 8px 14px; padding: 10px 0; background: var(--bg); border-bottom: 1px solid var(--line); margin-top: 14px; }
.btn { border: 1px solid var(--line); background: var(--panel); border-radius: 7px; padding: 3px 11px; cursor: pointer; }
.btn:hover { border-color: var(--model); }
.btn.primary { background: var(--model); border-color: var(--model); color: #fff; font-weight: 600; }
.filters { display: flex; gap: 10px; flex-wrap: wrap; }
.filters label { display: inline-flex; gap: 5px; align-items: center; cursor: pointer; user-select: none; }
.legend { margin-left: auto; display: flex; gap: 10px; color: var(--muted); font-size: 12px; }
.sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; vertical-align: -1px; margin-right: 4px; }
.sw.model_call { background: var(--model); } .sw.tool_call { background: var(--tool); } .sw.checkpoint { background: var(--cp); } .sw.override { background: var(--override); } .sw.live { background: var(--live); }

/* timeline */
.turn { margin-top: 18px; }
.turn-head { display: flex; align-items: baseline; gap: 10px; margin: 0 0 8px; font-size: 14px; }
.turn-head .n { font-weight: 700; }
.turn-head .muted { font-size: 12.5px; }
.turn-body { border-left: 2px solid var(--line); margin-left: 8px; padding-left: 14px; display: flex; flex-direction: column; gap: 8px; }
.hide-model_call .event.model_call, .hide-tool_call .event.tool_call, .hide-checkpoint .event.checkpoint, .hide-note .event.note { display: none; }

.event { background: var(--panel); border: 1px solid var(--line); border-left: 4px solid var(--line); border-radius: var(--radius); }
.event.model_call { border-left-color: var(--model); }
.event.tool_call { border-left-color: var(--tool); }
.event.checkpoint { border-left-color: var(--cp); }
.event.note { border-left-color: var(--note); }
.event.end { border-left-color: var(--end); }
.event.src-override { border-color: var(--override); border-left-color: var(--override); background: linear-gradient(90deg, var(--override-bg), var(--panel) 40%); }
.event.src-live { border-left: 4px dashed var(--live); }
.event.diverged { border-color: var(--bad); box-shadow: 0 0 0 2px var(--bad-bg); }
.event.flash { animation: flash 1.2s ease-out; }
@keyframes flash { from { box-shadow: 0 0 0 4px var(--model); } to { box-shadow: 0 0 0 0 transparent; } }
.event > summary { list-style: none; cursor: pointer; padding: 8px 12px; display: grid; grid-template-columns: 44px 82px 1fr auto; gap: 2px 10px; align-items: baseline; }
.event > summary::-webkit-details-marker { display: none; }
.event > summary:hover { background: var(--soft); border-radius: var(--radius); }
.event[open] > summary { border-bottom: 1px solid var(--line); border-radius: var(--radius) var(--radius) 0 0; }
.seq { color: var(--muted); font-family: var(--code); font-size: 12px; }
.seq::before { content: "▸ "; display: inline-block; width: 1em; }
.event[open] .seq::before { content: "▾ "; }
.kind { font-size: 11px; font-weight: 700; text-transform: uppercase; letter-spacing: .05em; }
.model_call .kind { color: var(--model); } .tool_call .kind { color: var(--tool); } .checkpoint .kind { color: var(--cp); } .note .kind { color: var(--note); } .end .kind { color: var(--end); }
.title { min-width: 0; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-weight: 600; }
.title .dim { color: var(--muted); font-weight: 400; margin-left: 6px; }
.when { color: var(--muted); font-size: 12px; text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.sub { grid-column: 3 / 5; min-width: 0; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-size: 12.5px; }
.sub.text { color: var(--good); }
.sub.calls { color: var(--tool); font-family: var(--code); font-size: 12px; }
.sub.err { color: var(--bad); }
.badges { grid-column: 3 / 5; display: flex; flex-wrap: wrap; gap: 5px; }
.badge { font-size: 11px; font-weight: 600; border-radius: 5px; padding: 0 6px; background: var(--soft); color: var(--muted); white-space: nowrap; }
.badge.override { background: var(--override); color: #fff; }
.badge.live { background: var(--live); color: #fff; }
.badge.replay { background: var(--soft); }
.badge.diverged { background: var(--bad); color: #fff; }
.badge.resumable { background: var(--cp-bg); color: var(--cp); }
.badge.observable { background: var(--soft); color: var(--muted); }
.badge.error { background: var(--bad-bg); color: var(--bad); }

.body { padding: 10px 14px 14px; display: flex; flex-direction: column; gap: 12px; }
.block h4 { margin: 0 0 6px; font-size: 12px; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); font-weight: 700; }
.block h4 code.name { text-transform: none; letter-spacing: 0; color: var(--tool); font-size: 12.5px; }
.block h4 .muted { text-transform: none; letter-spacing: 0; font-weight: 400; }
.callout { border-radius: 8px; padding: 8px 12px; font-size: 13px; }
.callout.override { background: var(--override-bg); border: 1px solid var(--override); }
.callout.live { background: var(--live-bg); border: 1px solid var(--live); }
.callout.bad { background: var(--bad-bg); border: 1px solid var(--bad); }
.callout.info { background: var(--soft); }
.msgs { display: flex; flex-direction: column; gap: 6px; }
.msg { display: grid; grid-template-columns: 78px 1fr; gap: 10px; padding: 6px 10px; border-radius: 8px; background: var(--soft); }
.msg.new { box-shadow: inset 3px 0 0 var(--model); }
.role { font-size: 11px; font-weight: 700; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); padding-top: 1px; }
.role .id { text-transform: none; letter-spacing: 0; font-weight: 400; margin-top: 2px; }
.role.user { color: var(--model); } .role.assistant { color: var(--good); } .role.tool { color: var(--tool); } .role.system { color: var(--note); }
.msg pre { max-height: 18em; overflow: auto; }
.msg .tc { color: var(--tool); }
.earlier > summary { cursor: pointer; color: var(--muted); font-size: 12.5px; margin-bottom: 6px; }
.bubble { background: var(--good-bg); border-radius: 8px; padding: 10px 12px; min-height: 2.4em; }
.bubble pre, .response-text { font-family: inherit; font-size: 14px; white-space: pre-wrap; word-break: break-word; }
.response-text.playing::after { content: "▍"; color: var(--good); animation: blink 1s steps(2) infinite; }
@keyframes blink { 50% { opacity: 0; } }
.player { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 12px; margin-top: 8px; font-size: 12.5px; }
.player select { border: 1px solid var(--line); border-radius: 6px; background: var(--panel); padding: 1px 4px; }
.progress { flex: 1 1 160px; height: 5px; background: var(--line); border-radius: 3px; overflow: hidden; min-width: 120px; }
.progress .bar { height: 100%; width: 0; background: var(--good); }
.clock { font-variant-numeric: tabular-nums; color: var(--muted); }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 4px 14px; font-size: 13px; }
.kv > .k { color: var(--muted); font-family: var(--code); font-size: 12.5px; }
.kv > .v { min-width: 0; }
.kv > .v pre { background: var(--soft); border-radius: 6px; padding: 6px 8px; max-height: 22em; overflow: auto; }
.str { font-family: var(--code); font-size: 12.5px; overflow-wrap: anywhere; }
.lit { font-family: var(--code); font-size: 12.5px; color: var(--model); }
pre.json { background: var(--soft); border-radius: 6px; padding: 8px 10px; max-height: 26em; overflow: auto; }
.facts { display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 12.5px; color: var(--muted); }
.facts b { color: var(--ink); font-weight: 600; }
table.files { border-collapse: collapse; width: 100%; font-size: 12.5px; }
table.files th, table.files td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); }
table.files th { color: var(--muted); font-weight: 600; }
table.files td.num { text-align: right; font-variant-numeric: tabular-nums; }
ul.paths { margin: 0; padding-left: 18px; font-family: var(--code); font-size: 12.5px; }
details.more > summary { cursor: pointer; color: var(--muted); font-size: 12.5px; }
details.more[open] > summary { margin-bottom: 6px; }
.chunks { max-height: 22em; overflow: auto; background: var(--soft); border-radius: 6px; padding: 6px 8px; }
.chunk { display: grid; grid-template-columns: 70px 1fr; gap: 8px; border-bottom: 1px dashed var(--line); padding: 2px 0; }
.chunk .ms { color: var(--muted); text-align: right; font-variant-numeric: tabular-nums; }
.footer { margin-top: 30px; color: var(--muted); font-size: 12px; text-align: center; }
"""

JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("forkpoint-data").textContent);
  var S = DATA.strings || [];
  var EVENTS = DATA.events || [];
  var BY_SEQ = {};
  EVENTS.forEach(function (e) { BY_SEQ[e.seq] = e; });
  var DIV = DATA.divergence || null;
  var DIV_SEQ = DIV && DIV.seq != null ? DIV.seq : null;

  // ------------------------------------------------------------------ DOM helpers (text nodes only)
  function h(tag, props) {
    var el = document.createElement(tag);
    if (props) {
      Object.keys(props).forEach(function (k) {
        var v = props[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "class") el.className = v;
        else if (k === "text") el.textContent = String(v);
        else if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? "" : String(v));
      });
    }
    for (var i = 2; i < arguments.length; i++) add(el, arguments[i]);
    return el;
  }
  function add(el, kid) {
    if (kid === null || kid === undefined || kid === false) return;
    if (Array.isArray(kid)) { kid.forEach(function (k) { add(el, k); }); return; }
    el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  function fmtMs(ms) {
    if (ms === null || ms === undefined || isNaN(ms)) return "–";
    ms = Number(ms);
    if (ms === 0) return "0";
    if (ms < 1) return ms.toFixed(2) + " ms";
    if (ms < 1000) return (ms < 10 ? ms.toFixed(1) : Math.round(ms)) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    var m = Math.floor(ms / 60000);
    return m + " min " + Math.round((ms - m * 60000) / 1000) + " s";
  }
  function fmtAt(t) { return t === null || t === undefined ? "" : "+" + (t / 1000).toFixed(3) + " s"; }
  function short(s, n) {
    s = String(s === null || s === undefined ? "" : s).replace(/\s+/g, " ").trim();
    return s.length > n ? s.slice(0, n - 1) + "…" : s;
  }
  // An integer JSON.parse would round comes as "\u0000int:<digits>", and a string that began like
  // that or like "\u0000str:" as "\u0000str:" + itself (forkpoint/html.py): shown as recorded.
  function bigInt(v) { return typeof v === "string" && v.slice(0, 5) === "\u0000int:"; }
  function shown(v) {
    return typeof v === "string" && (bigInt(v) || v.slice(0, 5) === "\u0000str:") ? v.slice(5) : v;
  }
  function json(v, indent) {
    var text;
    try { text = JSON.stringify(v, null, indent === undefined ? 2 : indent); } catch (err) { return String(v); }
    if (typeof text !== "string") return String(v);
    // (a quote after a backslash is inside a string: only an opening quote starts such a value)
    return text.replace(/(^|[^\\])"\\u0000int:(-?\d+)"/g, "$1$2").replace(/(^|[^\\])"\\u0000str:/g, '$1"');
  }
  function parseMaybe(s) {
    if (typeof s !== "string") return s;
    if (/\d{16}/.test(s)) return s;  // JSON text with a number JSON.parse may round: shown as it is
    try { return JSON.parse(s); } catch (err) { return s; }
  }
  function compact(v) { return typeof v === "string" ? shown(v) : json(v, 0); }
  function argsLine(args) {
    if (args && typeof args === "object" && !Array.isArray(args)) {
      return Object.keys(args).map(function (k) { return k + "=" + short(compact(args[k]), 40); }).join(", ");
    }
    return short(compact(args), 80);
  }
  function plural(n, one, many) { return n + " " + (n === 1 ? one : (many || one + "s")); }

  // A JSON value for reading: objects as key/value rows, long or multi-line strings as blocks.
  function valueView(v) {
    if (v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length && !("$b64" in v)) {
      var kv = h("div", { class: "kv" });
      Object.keys(v).forEach(function (k) { add(kv, [h("div", { class: "k", text: k }), h("div", { class: "v" }, cell(v[k]))]); });
      return kv;
    }
    return cell(v);
  }
  function cell(v) {
    if (bigInt(v)) return h("span", { class: "lit", text: shown(v) });
    v = shown(v);
    if (typeof v === "string") {
      if (v.indexOf("\n") >= 0 || v.length > 100) return h("pre", { text: v });
      return h("span", { class: "str", text: v });
    }
    if (v === null || typeof v !== "object") return h("span", { class: "lit", text: json(v) });
    return h("pre", { text: json(v) });
  }
  function block(title, extra) {
    var b = h("div", { class: "block" }, h("h4", null, title, extra ? h("span", { class: "muted", text: "  " + extra }) : null));
    for (var i = 2; i < arguments.length; i++) add(b, arguments[i]);
    return b;
  }
  function more(title, build) {
    // Content built when first opened (large raw views stay out of the DOM until asked for).
    var d = h("details", { class: "more" }, h("summary", { text: title }));
    d.addEventListener("toggle", function () {
      if (d.open && !d.dataset.built) { d.dataset.built = "1"; add(d, build()); }
    });
    return d;
  }
  function seqLink(seq, label) {
    return h("a", { href: "#ev-" + seq, onclick: function (ev) { ev.preventDefault(); openEvent(seq); } }, label || "#" + seq);
  }

  // ------------------------------------------------------------------ header
  function header() {
    var hd = DATA.header || {};
    var st = DATA.stats || {};
    var chips = h("div", { class: "chips" });
    if (DATA.truncated) add(chips, h("span", { class: "chip warn", text: "truncated log" }));
    if (!DATA.finished) add(chips, h("span", { class: "chip warn", text: "did not finish" }));
    else if (st.exit_code === 0) add(chips, h("span", { class: "chip good", text: "exit 0" }));
    else add(chips, h("span", { class: "chip bad", text: "exit " + st.exit_code }));
    if (hd.parent) add(chips, h("span", { class: "chip whatif", text: "what-if session" }));
    if (hd.replay && (hd.replay.overrides || []).length) add(chips, h("span", { class: "chip whatif", text: plural(hd.replay.overrides.length, "override") }));
    var meta = h("dl", { class: "meta" });
    function row(k, v) { if (v !== null && v !== undefined && v !== "") add(meta, [h("dt", { text: k }), h("dd", null, v)]); }
    row("command", (hd.argv || []).length ? h("code", { text: (hd.argv || []).join(" ") }) : null);
    row("started", hd.created ? hd.created.replace("T", " ").replace("Z", " UTC") : null);
    row("cwd", hd.cwd ? h("code", { text: hd.cwd }) : null);
    if (hd.git) row("git", h("code", { text: String(hd.git.commit || "").slice(0, 12) + " " + (hd.git.branch || "(detached)") + (hd.git.dirty ? " · dirty" : "") }));
    var tags = Object.keys(hd.tags || {}).filter(function (k) { return hd.tags[k] !== null; });
    row("tags", tags.length ? tags.map(function (k) { return k + "=" + hd.tags[k]; }).join(", ") : null);
    if (hd.workspace && hd.workspace.root) row("workspace", h("code", { text: hd.workspace.root }));
    if ((hd.tools || []).length) row("tools", h("code", { text: hd.tools.join(", ") }));
    row("versions", Object.keys(hd.versions || {}).map(function (k) { return k + " " + hd.versions[k]; }).join(" · "));
    function stat(v, k) { return h("div", { class: "stat" }, h("div", { class: "v", text: v }), h("div", { class: "k", text: k })); }
    var stats = h("div", { class: "stats" },
      stat(fmtMs(st.duration_ms), "duration"),
      stat(String(st.model_calls), st.model_calls === 1 ? "model call" : "model calls"),
      stat(String(st.tool_calls), st.tool_calls === 1 ? "tool call" : "tool calls"),
      st.mcp_requests ? stat(String(st.mcp_requests), st.mcp_requests === 1 ? "MCP session request" : "MCP session requests") : null,
      stat(String(st.checkpoints), st.checkpoints === 1 ? "checkpoint" : "checkpoints"),
      stat(st.input_tokens + " → " + st.output_tokens, "tokens in → out"),
      stat(String(st.events), "events"));
    return h("header", { class: "hero" },
      h("div", { class: "brand" }, h("b", { text: "forkpoint" }), h("span", { text: "session viewer" })),
      h("h1", null, h("span", { text: hd.name || "Session" }), h("code", { text: hd.session_id || "" })),
      chips, meta, stats);
  }

  // against: the parent's call the changes compare with (the nearest of several alike, not always the expected one)
  function changesTable(changes, against) {
    if (!changes || !changes.length) return null;
    var t = h("table", { class: "changes" },
      h("colgroup", null, h("col", { class: "c-path" }), h("col"), h("col")),
      h("tr", null, h("th", { text: "path" }), h("th", { text: against != null ? "parent #" + against : "parent (expected)" }), h("th", { text: "this run (actual)" })));
    changes.slice(0, 30).forEach(function (c) {
      // A difference an ignore rule takes out of the match key did not make the run diverge: said,
      // as the CLI's "(ignored)", and muted, so it is not read as the cause.
      add(t, h("tr", c.ignored ? { class: "ignored" } : null,
        h("td", null, h("code", { text: c.path }), c.ignored ? h("div", { class: "muted small", text: "ignored by a match rule" }) : null),
        h("td", { class: "exp" }, c.op === "added" ? h("span", { class: "muted", text: "—" }) : h("pre", { text: compact(c.expected) })),
        h("td", { class: "act" }, c.op === "removed" ? h("span", { class: "muted", text: "—" }) : h("pre", { text: compact(c.actual) }))));
    });
    return t;
  }

  function whatIfPanel() {
    var hd = DATA.header || {};
    if (!DATA.parent && !DIV) return null;
    var p = DATA.parent || {};
    var replay = hd.replay || {};
    var panel = h("section", { class: "whatif-panel", id: "whatif" },
      h("h2", { text: "What-if run" }),
      h("div", null, "Replay of ", h("code", { text: p.session_id || "?" }), p.name ? " (" + p.name + ")" : "",
        p.seq !== null && p.seq !== undefined ? " from seq " + p.seq : "",
        p.found ? "" : h("span", { class: "muted", text: " — the parent session is not in this store" })));
    var facts = h("div", { class: "facts" });
    if (replay.models) add(facts, h("span", null, "models: ", h("b", { text: replay.models })));
    if (replay.tools) add(facts, h("span", null, "tools: ", h("b", { text: replay.tools })));
    if (replay.on_divergence) add(facts, h("span", null, "on divergence: ", h("b", { text: replay.on_divergence })));
    var counts = {};
    EVENTS.forEach(function (e) { if (e.source) counts[e.source] = (counts[e.source] || 0) + 1; });
    Object.keys(counts).forEach(function (k) { add(facts, h("span", null, k + ": ", h("b", { text: String(counts[k]) }))); });
    add(panel, facts);
    (replay.overrides || []).forEach(function (o) { add(panel, h("div", { class: "small" }, "override ", h("code", { text: o }))); });
    var overridden = EVENTS.filter(function (e) { return e.source === "override"; });
    if (overridden.length) {
      add(panel, h("div", { class: "small" }, "overridden: ", overridden.map(function (e, i) {
        return [i ? ", " : "", seqLink(e.seq, "#" + e.seq + " " + (e.tool || (e.summary && e.summary.model) || e.type))];
      })));
    }
    if (DIV) {
      if (DIV.equivalent) {
        add(panel, h("div", { class: "divergence none" }, h("b", { text: "No divergence. " }), "Every call pairs with an equivalent call of the parent (same match keys)."));
      } else {
        add(panel, h("div", { class: "divergence", id: "divergence" },
          h("b", { text: "Diverged. " }), DIV.text || "",
          DIV_SEQ !== null ? h("span", null, " — ", seqLink(DIV_SEQ, "go to #" + DIV_SEQ)) : null,
          h("span", { class: "muted", text: DIV.from === "report" ? " (from the replay report)" : DIV.from === "session" ? " (as the run recorded it)" : " (compared with the parent)" }),
          changesTable(DIV.changes, DIV.diff_against)));
      }
    }
    return panel;
  }

  // ------------------------------------------------------------------ sweep: pass rate by checkpoint
  // A later checkpoint's arms passing says nothing of an earlier one whose arms all failed.
  function sweepRecoverable(sw) {
    var dead = sw.points.filter(function (p) { return p.ran > 0 && p.passed === 0; });
    if (!dead.length) return "Arms passed from every checkpoint: still recoverable at #" + sw.last_recoverable + ".";
    return "Arms passed from the last measured checkpoint: still recoverable at #" + sw.last_recoverable +
      ", though no arm passed from " + dead.map(function (p) { return "#" + p.seq; }).join(", ") + ".";
  }

  // Why a checkpoint's arms that ran measured nothing: each reason once, with how many arms gave it.
  function unmeasuredWhy(p) {
    var counts = new Map();
    (p.not_measured || []).forEach(function (w) { counts.set(w, (counts.get(w) || 0) + 1); });
    return Array.from(counts, function (e) { return e[0] + (e[1] > 1 ? " (" + e[1] + " arms)" : ""); }).join("; ");
  }

  function sweepPanel() {
    var sw = DATA.sweep;
    if (!sw || !sw.points || !sw.points.length) return null;
    var verdict = sw.unrecoverable_from === null || sw.unrecoverable_from === undefined
      ? (sw.last_recoverable === null || sw.last_recoverable === undefined ? "No arm was measured, from any checkpoint: nothing says whether the run was recoverable." : sweepRecoverable(sw))
      : (sw.last_recoverable === null || sw.last_recoverable === undefined
        ? "No arm passed from any checkpoint: unrecoverable from #" + sw.unrecoverable_from + " on."
        : "The run became unrecoverable between #" + sw.last_recoverable + " and #" + sw.unrecoverable_from + ": no arm from there on passed.");
    var chart = h("div", { class: "sweep-chart", id: "sweep-chart" });
    var whys = h("ul", { class: "small muted", id: "sweep-unmeasured" });
    sw.points.forEach(function (p) {
      var measured = p.ran > 0;
      var why = unmeasuredWhy(p);
      if (why) add(whys, h("li", { text: "#" + p.seq + ": not measured: " + why }));
      var cls = "sweep-col" + (!measured ? " unmeasured" : p.passed === 0 ? " dead" : "") + (p.seq === sw.unrecoverable_from ? " turning" : "");
      // (an arm that ran and never went live from its checkpoint is not measured: said, not counted)
      var tip = "checkpoint #" + p.seq + " (turn " + p.turn + "): " + (measured ? p.passed + "/" + p.ran + " arms passed, 95% CI " + Math.round(100 * p.low) + "–" + Math.round(100 * p.high) + " %" +
        (p.arms > p.ran ? "; " + (p.arms - p.ran) + " more arm(s) not measured, left out" + (why ? ": " + why : "") : "") :
        "no arm measured" + (why ? ": " + why : ""));
      var plot = h("div", { class: "sweep-plot" });
      var bar = h("div", { class: "sweep-bar" });
      bar.style.height = (measured ? 100 * p.rate : 0) + "%";
      add(plot, bar);
      if (measured) {
        var ci = h("div", { class: "sweep-ci" });
        ci.style.bottom = (100 * p.low) + "%";
        ci.style.height = (100 * (p.high - p.low)) + "%";
        add(plot, ci);
      }
      add(chart, h("button", { class: cls, type: "button", title: tip, "aria-label": tip, "data-seq": String(p.seq), onclick: function () { openEvent(p.seq); } },
        h("span", { class: "lbl", text: measured ? Math.round(100 * p.rate) + " %" : "—" }), plot,
        h("span", { class: "lbl cp", text: "#" + p.seq }), h("span", { class: "lbl muted", text: measured ? p.passed + "/" + p.ran : "not measured" })));
    });
    return h("section", { class: "sweep-panel", id: "sweep" },
      h("h2", { text: "Outcome by checkpoint" }),
      h("div", { class: "small", id: "sweep-verdict", text: verdict }),
      sw.note ? h("div", { class: "small", id: "sweep-note", text: sw.note }) : null,
      h("div", { class: "small muted", text: "Arms forked from each resumable checkpoint and continued live; bar: pass rate of the arms measured, whisker: its 95% interval." }),
      chart, whys.childNodes.length ? whys : null);
  }

  // ------------------------------------------------------------------ overview strip
  function overview() {
    var total = Math.max(1, Number((DATA.stats || {}).duration_ms) || 0);
    EVENTS.forEach(function (e) {
      if (e.t !== null && e.t !== undefined && e.type !== "end") total = Math.max(total, e.t + (Number(e.duration_ms) || 0));
    });
    function lane(label, types) {
      if (types[0] !== "model_call" && !EVENTS.some(function (e) { return types.indexOf(e.type) >= 0; })) return null;
      var track = h("div", { class: "track" });
      EVENTS.forEach(function (e) {
        if (types.indexOf(e.type) < 0 || e.t === null || e.t === undefined) return;
        var cls = "blk " + e.type + (e.source ? " src-" + e.source : "") + (e.seq === DIV_SEQ ? " diverged" : "");
        var tip = "#" + e.seq + " " + e.type.replace("_", " ") + " · " + titleText(e) + " · " + fmtAt(e.t) + (e.duration_ms ? " · " + fmtMs(e.duration_ms) : "");
        var b = h("button", { class: cls, type: "button", title: tip, "aria-label": tip, onclick: function () { openEvent(e.seq); } });
        b.style.left = (100 * e.t / total) + "%";
        if (e.type === "model_call" || e.type === "tool_call") b.style.width = (100 * (Number(e.duration_ms) || 0) / total) + "%";
        add(track, b);
      });
      return h("div", { class: "lane" }, h("span", { class: "lane-label", text: label }), track);
    }
    var axis = h("div", { class: "axis" });
    var step = niceStep(total / 6);
    for (var x = 0; x <= total + 1e-9; x += step) {
      var tk = h("span", { class: "tick", text: fmtMs(x) });
      tk.style.left = (100 * x / total) + "%";
      add(axis, tk);
    }
    return h("section", { class: "overview", id: "overview" },
      lane("model calls", ["model_call"]), lane("tool calls", ["tool_call"]), lane("checkpoints", ["checkpoint", "note"]), axis);
  }
  function niceStep(raw) {
    var p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-6))));
    var m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  // ------------------------------------------------------------------ event summaries
  function titleText(e) {
    if (e.type === "model_call") return (e.summary && e.summary.model) || "model";
    if (e.type === "http_call") return e.kind + " " + e.label;
    if (e.type === "tool_call") return e.tool + "(" + argsLine(e.args) + ")";
    if (e.type === "checkpoint") return e.boundary + " · " + (e.reason || "");
    if (e.type === "note") return short(e.text, 80);
    if (e.type === "value" && e.raw) return String(e.raw.fn || "value") + " → " + short(compact(e.raw.value), 60);
    if (e.type === "end") return "exit code " + e.exit_code;
    if (e.type === "outcome") return (e.passed ? "pass" : "fail") + " · " + short(e.command || "", 60);
    return e.type;
  }
  function sourceBadges(e, badges) {
    if (e.source === "override") add(badges, h("span", { class: "badge override", text: "override" }));
    else if (e.source === "live") add(badges, h("span", { class: "badge live", text: "live" }));
    else if (e.source === "replay") add(badges, h("span", { class: "badge replay", text: "replayed" + (e.recorded_seq ? " from #" + e.recorded_seq : "") }));
    if (e.source === "override" && e.recorded_seq) add(badges, h("span", { class: "badge", text: "recorded #" + e.recorded_seq }));
    if (e.seq === DIV_SEQ) add(badges, h("span", { class: "badge diverged", text: "diverged here" }));
  }
  function summaryRow(e) {
    var s = h("summary", null, h("span", { class: "seq", text: "#" + e.seq }), h("span", { class: "kind", text: e.type === "model_call" ? "model" : e.type === "tool_call" ? (e.mcp_session ? "mcp" : "tool") : e.type === "http_call" ? e.kind : e.type }));
    var title = h("span", { class: "title" });
    var when = h("span", { class: "when", title: e.ts || "" }, fmtAt(e.t), e.duration_ms && e.type !== "end" ? " · " + fmtMs(e.duration_ms) : "");
    var badges = h("div", { class: "badges" });
    var sub = null;
    sourceBadges(e, badges);
    if (e.type === "model_call") {
      var sm = e.summary || {};
      var u = sm.usage || {};
      add(title, [sm.model || "?", h("span", { class: "dim", text: (sm.provider || "") + " " + (sm.api || "") })]);
      if (u.input_tokens !== undefined && u.input_tokens !== null) add(badges, h("span", { class: "badge", text: u.input_tokens + " → " + u.output_tokens + " tok" }));
      var r = e.response;
      if (r && r.body_kind === "stream") add(badges, h("span", { class: "badge", text: "stream · " + plural((r.chunks || []).length, "chunk") }));
      if (sm.stop_reason) add(badges, h("span", { class: "badge", text: "stop: " + sm.stop_reason }));
      if (e.retry) add(badges, h("span", { class: "badge", text: "retry" }));
      if (r && r.status >= 400) add(badges, h("span", { class: "badge error", text: "HTTP " + r.status }));
      if (e.error) add(badges, h("span", { class: "badge error", text: e.error.type || "error" }));
      var calls = sm.tool_calls || [];
      if (r && r.text) sub = h("span", { class: "sub text", text: "“" + short(r.text, 160) + "”" });
      else if (calls.length) sub = h("span", { class: "sub calls", text: calls.map(function (c) { return "→ " + c.name + "(" + argsLine(parseMaybe(c.arguments)) + ")"; }).join("   ") });
      else if (sm.error || e.error) sub = h("span", { class: "sub err", text: sm.error || (e.error.type + ": " + e.error.message) });
      var server = sm.server_tool_calls || [];
      if (server.length) add(badges, h("span", { class: "badge", text: "server tools: " + server.map(function (c) { return c.name; }).join(", ") }));
    } else if (e.type === "http_call") {
      add(title, [e.label, h("span", { class: "dim", text: e.kind })]);
      if (e.status) add(badges, h("span", { class: "badge" + (e.status >= 400 ? " error" : ""), text: "HTTP " + e.status }));
      if (e.error) add(badges, h("span", { class: "badge error", text: e.error.type || "error" }));
    } else if (e.type === "tool_call") {
      add(title, [e.tool, h("span", { class: "dim", text: "(" + argsLine(e.args) + ")" })]);
      if (e.error) { sub = h("span", { class: "sub err", text: "raised " + e.error.type + ": " + short(e.error.message, 140) }); add(badges, h("span", { class: "badge error", text: "raised" })); }
      else if (e.mcp_error !== undefined) { sub = h("span", { class: "sub err", text: "failed (MCP isError): " + short(e.mcp_error, 140) }); add(badges, h("span", { class: "badge error", text: "failed" })); }
      else sub = h("span", { class: "sub", text: "→ " + short(compact(e.result), 160) });
    } else if (e.type === "checkpoint") {
      add(title, [h("span", { text: e.reason || "checkpoint" }), h("span", { class: "dim", text: "turn " + e.cp_turn })]);
      add(badges, h("span", { class: "badge " + e.boundary, text: e.boundary }));
      var ws = (e.workspace || {}).manifest || [];
      var src = e.source;
      sub = h("span", { class: "sub muted", text: plural(ws.length, "workspace file") + (src ? " · " + plural((src.changed || []).length, "changed file") + " · tree " + String(src.tree || "").slice(0, 12) : "") + (e.context_messages !== undefined ? " · " + plural(e.context_messages, "carried message") : "") });
    } else if (e.type === "value" && e.raw) {
      // (what the agent's own code read under deterministic: the function and what it returned)
      add(title, [String(e.raw.fn || "value"), h("span", { class: "dim", text: " → " + short(compact(e.raw.value), 160) })]);
    } else if (e.type === "note") {
      add(title, short(e.text, 140));
    } else if (e.type === "end") {
      add(title, ["exit code " + e.exit_code, e.incomplete ? h("span", { class: "bad", text: " · incomplete" }) : null, e.reason ? h("span", { class: "dim", text: e.reason }) : null]);
    } else {
      add(title, e.type);
    }
    // (a body not stored, said in words: the call is not whole in the session)
    (e.withheld || []).forEach(function (w) { add(badges, h("span", { class: "badge error", text: w[0] + " body not stored" })); });
    add(s, [title, when]);
    if (sub) add(s, sub);
    if (badges.childNodes.length) add(s, badges);
    return s;
  }

  // ------------------------------------------------------------------ event bodies
  function callouts(e, body) {
    if (e.source === "override") add(body, h("div", { class: "callout override" }, h("b", { text: "What-if override. " }), "This result was replaced for this run", e.override ? [": ", h("code", { text: e.override })] : ".", e.recorded_seq ? [" (recorded as #", seqLink(e.recorded_seq, String(e.recorded_seq)), " in the parent)"] : null));
    if (e.source === "live") add(body, h("div", { class: "callout live" }, h("b", { text: "Live. " }), "This call was made for real during the what-if run (not served from the recording)."));
    (e.withheld || []).forEach(function (w) { add(body, h("div", { class: "callout bad" }, h("b", { text: w[0] + " body NOT STORED: " }), w[1])); });
    if (e.seq === DIV_SEQ && DIV) add(body, h("div", { class: "callout bad" }, h("b", { text: "The run diverged here. " }), DIV.text || "", changesTable(DIV.changes, DIV.diff_against)));
  }
  function messageView(m, isNew) {
    var content = h("div");
    if (m.text) add(content, h("pre", { text: m.text }));
    (m.tool_calls || []).forEach(function (c) {
      add(content, h("pre", { class: "tc", text: "→ " + c.name + "(" + compact(c.arguments) + ")" + (c.id ? "   [" + c.id + "]" : "") }));
    });
    if (!m.text && !(m.tool_calls || []).length) add(content, h("span", { class: "muted", text: "(empty)" }));
    var role = h("div", { class: "role " + m.role, text: m.role });
    if (m.tool_call_id) add(role, h("div", { class: "id muted small mono", title: m.tool_call_id, text: short(m.tool_call_id, 12) }));
    return h("div", { class: "msg" + (isNew ? " new" : "") }, role, content);
  }
  var prevMessages = {};
  (function () {
    var last = null;
    EVENTS.forEach(function (e) {
      if (e.type !== "model_call") return;
      // The page holds the messages after those shared with the call before (messages_keep of them).
      if (e.messages_keep) e.messages = (last || []).slice(0, e.messages_keep).concat(e.messages || []);
      prevMessages[e.seq] = last; last = e.messages || [];
    });
  })();
  function modelBody(e) {
    var body = h("div", { class: "body" });
    callouts(e, body);
    var sm = e.summary || {};
    var msgs = (e.messages || []).map(function (i) { return S[i]; });
    var prev = prevMessages[e.seq] || [];
    var keep = 0;
    while (keep < prev.length && keep < (e.messages || []).length && prev[keep] === e.messages[keep]) keep++;
    var list = h("div", { class: "msgs" });
    if (keep > 0) {
      var earlier = h("details", { class: "earlier" }, h("summary", { text: plural(keep, "earlier message") + " (sent in previous turns)" }));
      var el = h("div", { class: "msgs" });
      msgs.slice(0, keep).forEach(function (m) { add(el, messageView(m, false)); });
      add(earlier, el);
      add(list, earlier);
    }
    msgs.slice(keep).forEach(function (m) { add(list, messageView(m, true)); });
    add(body, block("Request", plural(msgs.length, "message") + (keep ? " · " + (msgs.length - keep) + " new" : "") + (sm.n_tools ? " · " + plural(sm.n_tools, "tool") + " offered" : ""), list));

    var r = e.response;
    var facts = h("div", { class: "facts" });
    function fact(k, v) { if (v !== null && v !== undefined && v !== "") add(facts, h("span", null, k + " ", h("b", { text: String(v) }))); }
    if (r) { fact("status", r.status); fact("ended", r.ended); }
    fact("stop", sm.stop_reason);
    if (sm.usage) { fact("input tokens", sm.usage.input_tokens); fact("from cache", sm.usage.cache_read_input_tokens); fact("to cache", sm.usage.cache_creation_input_tokens); fact("output tokens", sm.usage.output_tokens); }
    fact("response model", sm.response_model);
    fact("duration", fmtMs(e.duration_ms));
    if (r && r.frames && r.frames.length) fact("first text", fmtMs(r.frames[0][0]));
    var resp = block("Response", null, facts);
    if (e.error) add(resp, h("div", { class: "callout bad" }, h("b", { text: e.error.type + ": " }), e.error.message || ""));
    if (sm.error && !e.error) add(resp, h("div", { class: "callout bad", text: sm.error }));
    if (r && r.reasoning) add(resp, more("Thinking (" + r.reasoning.length + " characters)", function () { return h("div", { class: "bubble" }, h("div", { class: "response-text", text: r.reasoning })); }));
    if (r && r.text) {
      var textEl = h("div", { class: "response-text", text: r.text });
      add(resp, h("div", { class: "bubble" }, textEl));
      if (r.frames && r.frames.length) add(resp, player(e, textEl));
    }
    (sm.tool_calls || []).forEach(function (c) {
      add(resp, h("div", { class: "block" }, h("h4", null, "tool call → ", h("code", { class: "name", text: c.name }), c.id ? h("span", { class: "muted", text: "  " + c.id }) : null), valueView(parseMaybe(c.arguments))));
    });
    (sm.server_tool_calls || []).forEach(function (c) {
      add(resp, h("div", { class: "block" }, h("h4", null, "server tool (run by the provider) ", h("code", { class: "name", text: c.name }), c.id ? h("span", { class: "muted", text: "  " + c.id }) : null), valueView(parseMaybe(c.arguments))));
    });
    if (!r && !e.error) add(resp, h("div", { class: "muted", text: "no response was recorded" }));
    add(body, resp);

    var params = e.params !== undefined ? S[e.params] : null;
    if (params !== null && params !== undefined) add(body, more("Parameters and tools (request body without the messages)", function () { return h("pre", { class: "json", text: json(params) }); }));
    add(body, more("HTTP: " + (e.method || "") + " " + (e.url || "") + (r ? " → " + r.status + " " + (r.reason || "") : ""), function () { return httpView(e); }));
    return body;
  }
  function headersTable(rows) {
    var kv = h("div", { class: "kv" });
    (rows || []).forEach(function (p) { add(kv, [h("div", { class: "k", text: p[0] }), h("div", { class: "v" }, h("span", { class: "str", text: p[1] }))]); });
    return kv;
  }
  function httpView(e) {
    var r = e.response;
    var out = [block("Request headers", null, headersTable(e.request_headers))];
    if (r) {
      out.push(block("Response headers", (r.http_version || "") + " " + r.status + " " + (r.reason || ""), headersTable(r.headers)));
      if (r.chunks) {
        var list = h("div", { class: "chunks" });
        r.chunks.forEach(function (c) { add(list, h("div", { class: "chunk" }, h("span", { class: "ms mono", text: "+" + Number(c[0]).toFixed(1) + " ms" }), h("pre", { text: c[1] }))); });
        out.push(block("Raw stream", plural(r.chunks.length, "chunk") + (r.frames_exact === false ? " · text timing approximated" : ""), list));
      } else if (r.body !== undefined) {
        out.push(block("Response body", null, h("pre", { class: "json", text: json(r.body) })));
      }
    }
    return out;
  }

  function player(e, textEl) {
    var r = e.response, frames = r.frames, full = r.text;
    var total = frames[frames.length - 1][0];
    var wrap = h("div", { class: "player", "data-state": "idle" });
    var btn = h("button", { class: "btn primary play", type: "button", text: "▶ Play stream" });
    var speed = h("select", { class: "speed", "aria-label": "playback speed" });
    [0.25, 0.5, 1, 2, 5, 10, 100].forEach(function (x) { add(speed, h("option", { value: String(x), selected: x === 1, text: x + "×" })); });
    var clock = h("span", { class: "clock", text: "0 ms / " + fmtMs(total) });
    var bar = h("div", { class: "bar" });
    add(wrap, [btn, h("label", null, "speed ", speed), h("div", { class: "progress" }, bar), clock,
      h("span", { class: "muted", text: plural(frames.length, "text chunk") + " · recorded timing" + (r.frames_exact === false ? " (approx.)" : "") })]);
    var timer = null, i = 0, start = 0, rate = 1, pos = 0;
    function show(elapsed) {
      pos = Math.min(elapsed, total);
      clock.textContent = fmtMs(pos) + " / " + fmtMs(total);
      bar.style.width = (total ? 100 * pos / total : 100) + "%";
    }
    function finish(state) {
      if (timer !== null) clearTimeout(timer);
      timer = null;
      textEl.classList.remove("playing");
      if (state === "done") { textEl.textContent = full; show(total); }
      wrap.setAttribute("data-state", state);
      wrap.setAttribute("data-frames-played", String(i));
      btn.textContent = state === "done" ? "↻ Replay stream" : "▶ Play stream";
    }
    function tick() {
      var elapsed = (performance.now() - start) * rate;
      while (i < frames.length && frames[i][0] <= elapsed) { textEl.appendChild(document.createTextNode(frames[i][1])); i++; }
      show(elapsed);
      wrap.setAttribute("data-frames-played", String(i));
      if (i >= frames.length) { finish("done"); return; }
      timer = setTimeout(tick, Math.max(0, (frames[i][0] - elapsed) / rate));
    }
    btn.addEventListener("click", function () {
      if (wrap.getAttribute("data-state") === "playing") { finish("paused"); return; }
      i = 0; rate = Number(speed.value) || 1; start = performance.now();
      textEl.textContent = ""; textEl.classList.add("playing");
      wrap.setAttribute("data-state", "playing"); btn.textContent = "■ Stop";
      tick();
    });
    speed.addEventListener("change", function () {
      var next = Number(speed.value) || 1;
      if (wrap.getAttribute("data-state") === "playing") {
        var elapsed = (performance.now() - start) * rate;
        rate = next; start = performance.now() - elapsed / rate;
        if (timer !== null) { clearTimeout(timer); timer = null; }
        tick();
      } else rate = next;
    });
    return wrap;
  }

  function toolBody(e) {
    var body = h("div", { class: "body" });
    callouts(e, body);
    var facts = h("div", { class: "facts" });
    add(facts, h("span", null, "duration ", h("b", { text: fmtMs(e.duration_ms) })));
    if (e.call_id) add(facts, h("span", null, "tool call id ", h("b", { class: "mono", text: e.call_id })));
    if (e.requested_by) add(facts, h("span", null, "asked for by ", seqLink(e.requested_by)));
    if (e.span_id) add(facts, h("span", null, "span ", h("b", { class: "mono", text: e.span_id })));
    add(body, facts);
    add(body, block("Arguments", null, h("div", { class: "args" }, valueView(e.args))));
    if (e.error) add(body, block("Raised", null, h("div", { class: "callout bad" }, h("b", { text: e.error.type + ": " }), e.error.message || "", e.error.module ? h("span", { class: "muted", text: "  (" + e.error.module + ")" }) : null)));
    else if (e.unrecorded) add(body, block("Result", null, h("div", { class: "callout bad" }, h("b", { text: "Not recorded: " }), e.unrecorded.message || e.unrecorded.type || "")));
    else add(body, block("Result", null, h("div", { class: "result" }, valueView(e.result))));
    return body;
  }

  function checkpointBody(e) {
    var body = h("div", { class: "body" });
    add(body, h("div", { class: "callout info" }, h("b", { text: e.boundary === "resumable" ? "Resumable. " : "Observable. " }),
      e.boundary === "resumable" ? "An agent boundary (every tool result of the previous turn is in): restore, validate or fork from here."
        : "Between tool calls of one turn: it can be restored and inspected, not resumed.",
      h("div", { class: "small" }, h("code", { text: "forkpoint restore " + ((DATA.header || {}).session_id || "SESSION") + "@" + e.seq + " --into DIR" }))));
    var facts = h("div", { class: "facts" });
    add(facts, h("span", null, "turn ", h("b", { text: String(e.cp_turn) })));
    if (e.context_messages !== undefined) add(facts, h("span", null, "carried messages ", h("b", { text: String(e.context_messages) })));
    if (e.context_digest) add(facts, h("span", null, "context digest ", h("b", { class: "mono", text: String(e.context_digest).slice(0, 16) })));
    add(body, facts);
    var src = e.source;
    if (src) {
      var sb = block("Source state", "tracked files against the base commit", valueView(src.fields || { tree: src.tree, base: src.base, repo: src.repo }));
      if ((src.changed || []).length) add(sb, [h("div", { class: "muted small", text: plural(src.changed.length, "changed file") + ":" }),
        h("ul", { class: "paths changed" }, src.changed.map(function (p) { return h("li", { text: p }); }))]);
      else add(sb, h("div", { class: "muted small", text: "no tracked file changed" }));
      if (src.patch) add(sb, more("Patch (" + plural(src.patch.split("\n").length, "line") + (src.patch_cut ? ", cut" : "") + ")", function () { return h("pre", { class: "json", text: src.patch }); }));
      add(body, sb);
    } else {
      add(body, h("div", { class: "muted small", text: "no source state (the workspace is not a git repository)" }));
    }
    var ws = e.workspace || {};
    var rows = ws.manifest || [];
    var wb = block("Workspace files", plural(rows.length, "untracked file") + (ws.fingerprint ? " · fingerprint " + String(ws.fingerprint).slice(0, 16) : ""));
    if (rows.length) {
      var t = h("table", { class: "files" }, h("tr", null, h("th", { text: "path" }), h("th", { text: "kind" }), h("th", { text: "mode" }), h("th", { text: "bytes" }), h("th", { text: "sha256" })));
      rows.forEach(function (row) {
        add(t, h("tr", null, h("td", { class: "mono", text: row[0] }), h("td", { text: row[1] }), h("td", { class: "mono", text: Number(row[2]).toString(8) }),
          h("td", { class: "num", text: String(row[3]) }), h("td", { class: "mono", text: String(row[4]).slice(0, 12) })));
      });
      add(wb, t);
    }
    if (ws.root) add(wb, h("div", { class: "muted small" }, "root ", h("code", { text: ws.root }), e.cwd ? ["  · agent cwd ", h("code", { text: e.cwd })] : null));
    var wf = ws.fields || {};
    var extra = Object.keys(wf).filter(function (k) { return wf[k] !== null && wf[k] !== ""; }).map(function (k) { return k + " " + wf[k]; });
    if (extra.length) add(wb, h("div", { class: "muted small", text: extra.join(" · ") }));
    add(body, wb);
    if ((e.referenced || []).length || (e.mentioned_absent || []).length || (e.uncaptured || []).length) {
      var rb = block("Files the carried messages refer to", null);
      if ((e.referenced || []).length) add(rb, h("ul", { class: "paths" }, e.referenced.map(function (p) { return h("li", { text: p }); })));
      if ((e.mentioned_absent || []).length) add(rb, h("div", { class: "muted small", text: "mentioned but absent then: " + e.mentioned_absent.join(", ") }));
      if ((e.uncaptured || []).length) add(rb, h("div", { class: "muted small", text: "there but not archived: " + e.uncaptured.join(", ") }));
      add(body, rb);
    }
    return body;
  }

  function noteBody(e) {
    var body = h("div", { class: "body" }, h("pre", { text: e.text || "" }));
    if (e.data !== undefined) add(body, block("Data", null, valueView(e.data)));
    return body;
  }
  function endBody(e) {
    var body = h("div", { class: "body" }, h("div", { class: "facts" },
      h("span", null, "exit code ", h("b", { text: String(e.exit_code) })),
      h("span", null, "duration ", h("b", { text: fmtMs(e.duration_ms) })),
      e.reason ? h("span", null, "reason ", h("b", { text: e.reason })) : null));
    if (e.incomplete) {
      add(body, h("div", { class: "callout bad" }, h("b", { text: "Incomplete: " }),
        "recording stopped early (" + e.incomplete + "); what the run did after that is not in the session"));
    }
    (e.uncaught || []).forEach(function (u) {
      add(body, h("div", { class: "callout bad" }, h("b", { text: "Uncaught " + u.type + ": " }), u.message || ""));
    });
    if (e.divergence) {
      var dv = e.divergence;
      add(body, h("div", { class: "callout bad" }, h("b", { text: "Diverged " }),
        "at the " + String(dv.kind || "call").replace("_", " ") + " #" + dv.position + " of the run" + (dv.label ? " (" + dv.label + ")" : "") + ": " + (dv.reason || ""),
        dv.seq ? h("span", null, " — ", seqLink(dv.seq, "this run's #" + dv.seq)) : null,
        dv.parent_seq ? h("span", { class: "muted", text: " (the parent's #" + dv.parent_seq + ")" }) : null));
    }
    return body;
  }
  function httpBody(e) {
    var body = h("div", { class: "body" });
    callouts(e, body);
    add(body, h("div", { class: "facts" }, h("span", null, e.kind + " ", h("b", { text: e.label })), e.status ? h("span", null, "HTTP ", h("b", { text: String(e.status) })) : null));
    if (e.error) add(body, h("div", { class: "callout bad" }, h("b", { text: e.error.type + ": " }), e.error.message || ""));
    return body;
  }
  function rawBody(e) { return h("div", { class: "body" }, h("pre", { class: "json", text: json(e.raw) })); }

  function eventCard(e) {
    var cls = "event " + e.type + (e.source ? " src-" + e.source : "") + (e.seq === DIV_SEQ ? " diverged" : "");
    var d = h("details", { class: cls, id: "ev-" + e.seq, "data-seq": e.seq, "data-type": e.type }, summaryRow(e));
    if (e.source) d.setAttribute("data-source", e.source);
    d.addEventListener("toggle", function () {
      if (!d.open || d.dataset.built) return;
      d.dataset.built = "1";
      var fn = { model_call: modelBody, http_call: httpBody, tool_call: toolBody, checkpoint: checkpointBody, note: noteBody, end: endBody }[e.type] || rawBody;
      try { add(d, fn(e)); } catch (err) { add(d, h("div", { class: "body" }, h("div", { class: "callout bad", text: "cannot show this event: " + err }), rawBody(e))); }
    });
    return d;
  }

  // ------------------------------------------------------------------ timeline of turns
  function timeline() {
    var groups = {}, order = [];
    EVENTS.forEach(function (e) {
      var key = e.type === "end" ? "end" : String(e.turn || 0);
      if (!groups[key]) { groups[key] = []; order.push(key); }
      groups[key].push(e);
    });
    order.sort(function (a, b) {
      if (a === "end") return 1;
      if (b === "end") return -1;
      return Number(a) - Number(b);
    });
    var main = h("main", { id: "timeline" });
    order.forEach(function (key) {
      var evs = groups[key].slice().sort(function (a, b) { return a.seq - b.seq; });
      var head = h("h3", { class: "turn-head" });
      if (key === "end") add(head, h("span", { class: "n", text: "End" }));
      else if (key === "0") add(head, h("span", { class: "n", text: "Before the first model call" }));
      else {
        var model = evs.filter(function (e) { return e.type === "model_call"; })[0];
        var tools = evs.filter(function (e) { return e.type === "tool_call"; }).map(function (e) { return e.tool; });
        var first = evs.filter(function (e) { return e.t !== null; })[0];
        add(head, [h("span", { class: "n", text: "Turn " + key }),
          h("span", { class: "muted", text: (first ? fmtAt(first.t) : "") + (model && model.summary ? " · " + model.summary.model : "") + (tools.length ? " · tools: " + tools.join(", ") : model && model.response && model.response.text ? " · answer" : "") })]);
      }
      var body = h("div", { class: "turn-body" });
      evs.forEach(function (e) { add(body, eventCard(e)); });
      add(main, h("section", { class: "turn", "data-turn": key }, head, body));
    });
    return main;
  }

  function toolbar() {
    var types = [["model_call", "model calls"], ["tool_call", "tool calls"], ["checkpoint", "checkpoints"], ["note", "notes"]];
    var filters = h("div", { class: "filters" });
    types.forEach(function (t) {
      var box = h("input", { type: "checkbox", checked: true, "data-filter": t[0] });
      box.addEventListener("change", function () { app.classList.toggle("hide-" + t[0], !box.checked); });
      add(filters, h("label", null, box, t[1]));
    });
    function all(open) { document.querySelectorAll("details.event").forEach(function (d) { d.open = open; }); }
    return h("div", { class: "toolbar" },
      h("button", { class: "btn", type: "button", id: "expand-all", text: "Expand all", onclick: function () { all(true); } }),
      h("button", { class: "btn", type: "button", id: "collapse-all", text: "Collapse all", onclick: function () { all(false); } }),
      filters,
      h("span", { class: "legend" },
        h("span", null, h("span", { class: "sw model_call" }), "model"), h("span", null, h("span", { class: "sw tool_call" }), "tool"),
        h("span", null, h("span", { class: "sw checkpoint" }), "checkpoint"), h("span", null, h("span", { class: "sw override" }), "override"),
        h("span", null, h("span", { class: "sw live" }), "live")));
  }

  function openEvent(seq) {
    var d = document.getElementById("ev-" + seq);
    if (!d) return;
    app.classList.remove("hide-" + d.getAttribute("data-type"));
    var box = document.querySelector('input[data-filter="' + d.getAttribute("data-type") + '"]');
    if (box) box.checked = true;
    d.open = true;
    d.scrollIntoView({ block: "start" });
    d.classList.remove("flash");
    void d.offsetWidth;
    d.classList.add("flash");
    if (history.replaceState) history.replaceState(null, "", "#ev-" + seq);
  }

  // ------------------------------------------------------------------ page
  var app = document.getElementById("app");
  var wrap = h("div", { class: "wrap" });
  add(wrap, [header(), whatIfPanel(), sweepPanel(),
    h("div", { class: "section-title" }, "Timeline", h("span", { class: "muted", text: "calls on the session's clock · click one to open it" })),
    overview(), toolbar(), timeline(),
    h("div", { class: "footer", text: "forkpoint " + DATA.forkpoint + " · self-contained page: no network, the session is embedded" })]);
  app.appendChild(wrap);
  var m = /^#ev-(\d+)$/.exec(location.hash || "");
  if (m) openEvent(Number(m[1]));
  document.documentElement.setAttribute("data-ready", "1");
})();
"""
