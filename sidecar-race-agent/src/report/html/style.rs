//! The page's one stylesheet, inline: system fonts only (no font is fetched), colours
//! that print, and the swimlanes' and charts' marks.

pub const CSS: &str = r#"
:root { --ink: #1d2330; --muted: #5b6475; --line: #d8dce4; --race: #c62828; --serve: #2e7d32; --start: #1565c0; --bg: #f7f8fa; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--ink); background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
p.headline, p.note { color: var(--muted); margin: 4px 0 12px; }
table.ranking { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
table.ranking th, table.ranking td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
table.ranking th { background: var(--bg); font-weight: 600; }
table.ranking td.num, table.ranking th.num { text-align: right; }
article.workload { margin-top: 28px; padding: 4px 0 8px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px 32px; align-items: flex-start; }
figure { margin: 0; }
figcaption { color: var(--muted); font-size: 12px; margin-top: 2px; }
svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: var(--muted); }
svg .axis { stroke: #9aa3b2; stroke-width: 1; }
svg .grid { stroke: var(--line); stroke-width: 1; stroke-dasharray: 3 3; }
svg .dot { fill: var(--race); fill-opacity: 0.8; }
svg .p50 { stroke: #ef6c00; stroke-width: 1.5; stroke-dasharray: 6 3; }
svg .p95 { stroke: #6a1b9a; stroke-width: 1.5; stroke-dasharray: 2 3; }
svg .share-bg { fill: var(--bg); stroke: var(--line); }
svg .share-fill { fill: var(--race); }
svg .lane-bg { fill: var(--bg); }
svg .running { fill: #c5d5ea; }
svg .serving { fill: var(--serve); fill-opacity: 0.75; }
svg .refusal { stroke: var(--race); stroke-width: 2; }
svg .refusal-count { fill: var(--race); font-weight: 600; }
svg .started { fill: var(--start); }
svg .listening { fill: var(--serve); }
svg .closed { fill: #fff; stroke: var(--serve); stroke-width: 2; }
svg .probe { fill: #fff; stroke: var(--start); stroke-width: 1.5; }
svg .pod-event { stroke: var(--ink); stroke-width: 1; stroke-dasharray: 4 3; }
svg .lane-name { fill: var(--ink); font-weight: 600; }
ul.fixes { padding-left: 18px; margin: 4px 0; }
ul.fixes li { margin: 4px 0; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre.patch { background: var(--bg); border: 1px solid var(--line); padding: 8px 10px; overflow-x: auto; font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
figure.incident { margin: 12px 0 18px; }
ol.entries { columns: 2; font-size: 12px; color: var(--muted); margin: 6px 0; padding-left: 22px; }
.tag { display: inline-block; padding: 0 6px; border-radius: 3px; background: var(--bg); border: 1px solid var(--line); font-size: 12px; }
"#;
