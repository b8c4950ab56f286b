//! One traced run as a self-contained HTML page: no network, no outside script or font. The
//! violated invariants and the reproduction command are at the top. Below them is a table with
//! a column per lane and a row per event, messages drawn as arrows between the lanes they
//! join. A step-through (buttons, arrow keys and a step counter) moves a highlight from event
//! to event, and a panel beside it shows what each client knows and what the store holds at
//! that event. There is a print style, and a narrow screen shows each event as a line of its
//! own.

use crate::report::{bounds_mark, play_command, replay_command, Schedule, PLAY_PORT_DEFAULT};
use retrysim_models::HandlerEntry;
use retrysim_sim::{Bounds, Lane, Row, RunOutcome, Timeline};
use std::fmt::Write as _;

const STYLE: &str = "
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1b1b1b;background:#fff}
header{padding:12px 16px;background:#f4f4f6;border-bottom:1px solid #ddd}
h1{font-size:18px;margin:0 0 6px}
.violation{color:#a40000;font-weight:600;margin:4px 0}
.clean{color:#0a6b0a;font-weight:600}
code{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;background:#fff;border:1px solid #ddd;padding:2px 4px;word-break:break-all}
main{display:flex;gap:12px;padding:12px 16px;align-items:flex-start}
.controls{position:sticky;top:0;background:#fff;padding:6px 0;display:flex;gap:8px;align-items:center}
button{font:inherit;padding:4px 10px}
.wrap{overflow-x:auto;flex:1;position:relative}
svg.arrows{position:absolute;left:0;top:0;pointer-events:none;overflow:visible}
svg.arrows line{stroke:#1b1b1b;stroke-width:1.5}
svg.arrows line.lost{stroke:#a40000;stroke-dasharray:5 3}
svg.arrows text{fill:#a40000;font:bold 13px sans-serif}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;vertical-align:top;font-size:13px}
th{position:sticky;top:40px;background:#fafafa}
td.num{color:#777;white-space:nowrap}
td.knows.same{color:#999}
td.knows.changed{font-weight:600}
tr.event.current{background:#fff3c4}
tr.event.current td{border-bottom-color:#e0c060}
.arrow{white-space:nowrap;font-weight:600}
.lost{color:#a40000}
.crash{color:#a40000;font-weight:600}
aside{width:320px;flex:none;position:sticky;top:0;border:1px solid #ddd;padding:8px;background:#fcfcfc}
aside h2{font-size:14px;margin:4px 0}
aside p{margin:2px 0 8px;word-break:break-word}
@media (max-width:760px){
 svg.arrows{display:none}
 main{flex-direction:column}
 aside{width:auto;position:static}
 thead{display:none}
 tr.event{display:block;border-bottom:1px solid #eee;padding:4px 0}
 tr.event td{display:none;border:0}
 tr.event td.num,tr.event td.filled,tr.event td.knows.changed{display:block}
 tr.event td.filled::before,tr.event td.knows::before{content:attr(data-lane) ': ';color:#777}
}
@media print{
 .controls,aside,svg.arrows{display:none}
 tr.event.current{background:none}
 th{position:static}
}
";

const SCRIPT: &str = "
(function(){
 var rows=Array.prototype.slice.call(document.querySelectorAll('tr.event'));
 var counter=document.getElementById('counter');
 var knows=document.getElementById('knows');
 var store=document.getElementById('store');
 var current=0;
 function show(index){
  if(rows.length===0){return;}
  current=Math.max(0,Math.min(rows.length-1,index));
  rows.forEach(function(row,i){row.classList.toggle('current',i===current);});
  var row=rows[current];
  counter.textContent='event '+(current+1)+' of '+rows.length+' (step '+row.dataset.step+', '+row.dataset.time+' ms)';
  knows.textContent=row.dataset.knows;
  store.textContent=row.dataset.store;
  row.scrollIntoView({block:'nearest'});
 }
 document.getElementById('first').addEventListener('click',function(){show(0);});
 document.getElementById('previous').addEventListener('click',function(){show(current-1);});
 document.getElementById('next').addEventListener('click',function(){show(current+1);});
 document.getElementById('last').addEventListener('click',function(){show(rows.length-1);});
 rows.forEach(function(row,i){row.addEventListener('click',function(){show(i);});});
 document.addEventListener('keydown',function(event){
  if(event.key==='ArrowRight'||event.key==='ArrowDown'){show(current+1);event.preventDefault();}
  if(event.key==='ArrowLeft'||event.key==='ArrowUp'){show(current-1);event.preventDefault();}
  if(event.key==='Home'){show(0);}
  if(event.key==='End'){show(rows.length-1);}
 });
 // Each message as an SVG arrow along the bottom of its row, from its sender's column to
 // its receiver's; a lost one dashed, crossed out halfway.
 var wrap=document.querySelector('.wrap');
 var svgNs='http://www.w3.org/2000/svg';
 var arrows=document.createElementNS(svgNs,'svg');
 arrows.setAttribute('class','arrows');
 arrows.innerHTML='<defs><marker id=\"head\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\"/></marker></defs>';
 wrap.appendChild(arrows);
 function centre(column){
  var cell=document.querySelectorAll('thead th')[column].getBoundingClientRect();
  return cell.left+cell.width/2-wrap.getBoundingClientRect().left+wrap.scrollLeft;
 }
 function draw(){
  Array.prototype.slice.call(arrows.querySelectorAll('line,text')).forEach(function(n){n.remove();});
  arrows.setAttribute('width',wrap.scrollWidth);
  arrows.setAttribute('height',wrap.scrollHeight);
  document.querySelectorAll('tr.event[data-from]').forEach(function(row){
   var x1=centre(+row.dataset.from),x2=centre(+row.dataset.to);
   var y=row.getBoundingClientRect().bottom-wrap.getBoundingClientRect().top+wrap.scrollTop-4;
   var line=document.createElementNS(svgNs,'line');
   line.setAttribute('x1',x1);line.setAttribute('x2',x2);
   line.setAttribute('y1',y);line.setAttribute('y2',y);
   line.setAttribute('class',row.dataset.lost?'message lost':'message');
   if(!row.dataset.lost){line.setAttribute('marker-end','url(#head)');}
   arrows.appendChild(line);
   if(row.dataset.lost){
    var cross=document.createElementNS(svgNs,'text');
    cross.setAttribute('x',(x1+x2)/2-4);cross.setAttribute('y',y+4);
    cross.textContent='\\u2715';
    arrows.appendChild(cross);
   }
  });
 }
 draw();
 window.addEventListener('resize',draw);
 document.body.dataset.ready='true';
 show(0);
})();
";

/// One traced run as a self-contained HTML page (see the module's documentation).
pub fn run_html(entry: &HandlerEntry, bounds: &Bounds, outcome: &RunOutcome) -> String {
    let timeline = outcome.timeline.as_ref().expect("a replayed run is traced");
    let title = format!("{}  tape {}", entry.name(), outcome.tape);
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(&title)
    );
    out.push_str(&header(entry, bounds, outcome, &title));
    out.push_str("<main>\n<div class=\"wrap\">\n");
    out.push_str(
        "<div class=\"controls\"><button id=\"first\">&laquo; first</button>\
         <button id=\"previous\">&#x25C0; previous</button>\
         <button id=\"next\">next &#x25B6;</button>\
         <button id=\"last\">last &raquo;</button>\
         <span id=\"counter\"></span></div>\n",
    );
    out.push_str(&table(timeline));
    out.push_str(
        "</div>\n<aside><h2>What the clients know</h2><p id=\"knows\"></p>\
         <h2>The store</h2><p id=\"store\"></p></aside>\n</main>\n",
    );
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body>\n</html>\n");
    out
}

/// The title, the run's facts, the violations and the reproduction command.
fn header(entry: &HandlerEntry, bounds: &Bounds, outcome: &RunOutcome, title: &str) -> String {
    let mut out = format!("<header>\n<h1>{}</h1>\n", escape(title));
    if outcome.violations.is_empty() {
        out.push_str("<p class=\"clean\">Every invariant holds in this run.</p>\n");
    }
    for violation in &outcome.violations {
        let _ = writeln!(
            out,
            "<p class=\"violation\">VIOLATED {}: {}</p>",
            violation.invariant,
            escape(&violation.detail)
        );
    }
    let command = replay_command(entry, bounds, &Schedule::Tape(outcome.tape.clone()));
    let play = play_command(entry, bounds, &outcome.tape);
    let faults = &outcome.faults;
    let _ = writeln!(
        out,
        "<p>{} steps; faults: {} drops, {} duplicates, {} crashes, {} reconnects, {} storage</p>\n\
         <p>reproduce: <code>{}</code></p>\n<p>bounds: <code>{}</code></p>\n\
         <p class=\"play\">play from here, choice by choice: <code>{}</code>, then \
         <a href=\"http://127.0.0.1:{PLAY_PORT_DEFAULT}/?tape={}&amp;to=end&amp;system={}&amp;bounds={}\">open the page</a></p>\n</header>",
        outcome.steps,
        faults.drops,
        faults.duplicates,
        faults.crashes,
        faults.reconnects,
        faults.storage,
        escape(&command),
        escape(&bounds.to_string()),
        escape(&play),
        outcome.tape,
        escape(&crate::service::answers::path_escaped(&entry.name())),
        bounds_mark(bounds),
    );
    out
}

/// The events as a table: a column per lane, a row per event, each row carrying what the
/// clients know and what the store holds then.
pub(crate) fn table(timeline: &Timeline) -> String {
    let lanes = lanes(timeline);
    let mut out = String::from("<table>\n<thead><tr><th>step</th><th>t (ms)</th>");
    for lane in &lanes {
        let _ = write!(out, "<th>{}</th>", escape(&lane.title()));
    }
    out.push_str("<th>clients know</th></tr></thead>\n<tbody>\n");
    let mut store = String::from("(as the run began)");
    let mut knew = "";
    for row in &timeline.rows {
        if row.lane == Lane::Store {
            store = row.text.clone();
        }
        let _ = write!(
            out,
            "<tr class=\"event\"{} data-step=\"{}\" data-time=\"{}\" data-knows=\"{}\" data-store=\"{}\">\
             <td class=\"num\">{}</td><td class=\"num\">{}</td>",
            arrow_attributes(row, timeline, &lanes),
            row.step,
            row.time_ms,
            escape(&row.knows),
            escape(&store),
            row.step,
            row.time_ms
        );
        for &lane in &lanes {
            out.push_str(&cell(row, lane, timeline));
        }
        // What the clients believe, on every row: marked where it changes.
        let changed = if row.knows == knew { "same" } else { "changed" };
        knew = &row.knows;
        let _ = writeln!(
            out,
            "<td class=\"knows {changed}\" data-lane=\"clients know\">{}</td></tr>",
            escape(&row.knows)
        );
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// The lanes shown, in order: the clock, the clients, the admin, the network, the server, the
/// store, and the provider when the run called it.
fn lanes(timeline: &Timeline) -> Vec<Lane> {
    let mut lanes = Vec::new();
    if timeline.rows.iter().any(|row| row.lane == Lane::Clock) {
        lanes.push(Lane::Clock);
    }
    lanes.extend((0..timeline.clients).map(Lane::Client));
    if timeline.admin {
        lanes.push(Lane::Admin);
    }
    lanes.extend([Lane::Network, Lane::Server, Lane::Store]);
    if timeline.rows.iter().any(|row| row.lane == Lane::Provider) {
        lanes.push(Lane::Provider);
    }
    lanes
}

/// The cell of `lane` in `row`: the event's text in its own lane; a network event drawn as an
/// arrow between the client and the server.
fn cell(row: &Row, lane: Lane, timeline: &Timeline) -> String {
    if row.lane != lane {
        return "<td></td>".into();
    }
    let title = escape(&lane.title());
    let text = escape(&row.text);
    let body = match lane {
        Lane::Network => match arrow(&row.text, timeline) {
            Some(arrow) => format!("{arrow} {text}"),
            None => text,
        },
        Lane::Server if row.text.contains("CRASH") => {
            format!("<span class=\"crash\">{text}</span>")
        }
        _ => text,
    };
    format!("<td class=\"filled\" data-lane=\"{title}\">{body}</td>")
}

/// For a message's row, the table columns of its sender and receiver and whether it was lost
/// (`data-from`, `data-to`, `data-lost`), for the script to draw its arrow; nothing otherwise.
fn arrow_attributes(row: &Row, timeline: &Timeline, lanes: &[Lane]) -> String {
    if row.lane != Lane::Network {
        return String::new();
    }
    let Some((from, to, lost)) = arrow_ends(&row.text, timeline) else {
        return String::new();
    };
    // Two columns (step, time) come before the lanes.
    let column = |lane: Lane| lanes.iter().position(|&l| l == lane).map(|i| i + 2);
    match (column(from), column(to)) {
        (Some(from), Some(to)) => {
            let lost = if lost { " data-lost=\"true\"" } else { "" };
            format!(" data-from=\"{from}\" data-to=\"{to}\"{lost}")
        }
        _ => String::new(),
    }
}

/// The arrow of a network event as text: `c1 → server` for a request delivered, `server → c1`
/// for a reply, crossed out when it is lost.
fn arrow(text: &str, timeline: &Timeline) -> Option<String> {
    let (from, to, lost) = arrow_ends(text, timeline)?;
    let name = |lane: Lane| escape(&lane.title());
    let (from, to) = (name(from), name(to));
    Some(if lost {
        format!("<span class=\"arrow lost\">{from} &#x2192;&#x2715; {to}</span>")
    } else {
        format!("<span class=\"arrow\">{from} &#x2192; {to}</span>")
    })
}

/// The lanes a network event's message goes from and to, and whether it was lost.
fn arrow_ends(text: &str, timeline: &Timeline) -> Option<(Lane, Lane, bool)> {
    let (event, rest) = text.split_once(' ')?;
    let label = rest.split(':').next().unwrap_or(rest);
    let label = label.strip_suffix(" lost in flight").unwrap_or(label);
    let (kind, name) = label.split_once(' ')?;
    let intent = name.split('#').next().unwrap_or(name);
    let client = timeline
        .intents
        .iter()
        .find(|summary| summary.intent.label() == intent)
        .map_or(1, |summary| summary.client);
    let client = Lane::Client(client.saturating_sub(1));
    let (from, to) = match kind {
        "request" | "lookup" => (client, Lane::Server),
        _ => (Lane::Server, client),
    };
    let lost = event == "drop" || text.ends_with(" lost in flight");
    Some((from, to, lost))
}

/// Text safe in HTML content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// The file name of the page (`.html`) or diagram (`.mmd`) of a matrix cell's failure:
/// `counter-naive-at-most-once-effect`.
pub fn cell_file(entry: &HandlerEntry, invariant: retrysim_sim::Invariant) -> String {
    format!("{}-{}-{}", entry.domain, entry.handler, invariant.name())
}

/// The handlers × invariants matrix as a self-contained HTML page: each failing cell names the
/// seed that first found it and links to its failure's page and its sequence diagram's page
/// (files named by [`cell_file`] beside it: `.html`, `-diagram.html`).
pub fn matrix_page(rows: &[crate::report::MatrixRow<'_>], seeds: &std::ops::Range<u64>) -> String {
    use retrysim_sim::Invariant;
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>retrysim: every built-in handler</title>\n<style>{STYLE}\
         td.bad{{color:#a40000}} td.ok{{color:#0a6b0a}} th{{top:0}}\
         main{{display:block}} .wrap{{min-width:0}} th,td{{font-size:12px;padding:3px 4px}}\
         @media (max-width:760px){{thead{{display:table-header-group}}}}</style>\n</head>\n<body>\n<header>\n\
         <h1>retrysim: every built-in handler over seeds {}..{}</h1>\n\
         <p>Each failing cell links to its shortest failure: its page, and its sequence diagram (the Mermaid text is beside it, as <code>.mmd</code>).</p>\n\
         </header>\n<main>\n<div class=\"wrap\">\n<table>\n<thead><tr><th>handler</th>",
        seeds.start, seeds.end
    );
    for invariant in Invariant::ALL {
        let _ = write!(out, "<th>{}</th>", invariant.name());
    }
    out.push_str("<th>declared</th><th>as declared</th></tr></thead>\n<tbody>\n");
    for row in rows {
        let _ = write!(
            out,
            "<tr><td>{}/{}</td>",
            escape(row.entry.domain),
            escape(row.entry.handler)
        );
        for &invariant in Invariant::ALL {
            let cell = match row.exploration.failure(invariant) {
                _ if !row.applicable.contains(&invariant) => "<td>n/a</td>".to_string(),
                Some(failure) => {
                    let file = cell_file(row.entry, invariant);
                    format!(
                        "<td class=\"bad\"><a href=\"{file}.html\">seed {}</a> \
                         (<a href=\"{file}-diagram.html\">diagram</a>)</td>",
                        failure.seed
                    )
                }
                None => "<td class=\"ok\">clean</td>".to_string(),
            };
            out.push_str(&cell);
        }
        let (class, verdict) = if row.as_declared() {
            ("ok", "yes")
        } else {
            ("bad", "NO")
        };
        let _ = writeln!(
            out,
            "<td>{}</td><td class=\"{class}\">{verdict}</td></tr>",
            escape(&row.entry.declared.to_string())
        );
    }
    out.push_str("</tbody>\n</table>\n</div>\n</main>\n</body>\n</html>\n");
    out
}
