//! The pictures, checked in a real browser: every faulty handler's shortest failure as an
//! HTML page, opened in headless Chromium (its script run, its DOM read back), and as a
//! Mermaid diagram rendered by Mermaid itself in the same browser; and the matrix page.
//!
//! Needs Debian's `chromium` (or `RETRYSIM_CHROMIUM=path`) and Mermaid's dist bundle at
//! `target/browser/mermaid.min.js` (or `RETRYSIM_MERMAID_JS=path`); `.ci/browser-deps`
//! installs both. Without them these tests are left out with one loud line on stderr naming
//! `.ci/browser-deps`, so that `cargo test` passes on a machine with nothing installed;
//! `RETRYSIM_BROWSER=required` (which `.ci/run` sets) makes anything missing a failure, and
//! `RETRYSIM_BROWSER=none` leaves them out on purpose. Screenshots (one failure per domain, at
//! 1280×800 and at a phone's 390×844) are saved under `target/browser/screenshots`.

use crate::timelines::shortest_failure_in;
use retrysim::models::{self, Declared, HandlerEntry};
use retrysim::report::MatrixRow;
use retrysim::{explore, html, report, Bounds, Shrunk};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the browser checks write their pages and screenshots.
pub fn browser_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("browser")
}

/// Headless Chromium and the Mermaid bundle, or `None` when the browser checks are left out:
/// on purpose (`RETRYSIM_BROWSER=none`), or because one is missing, said loudly. With
/// `RETRYSIM_BROWSER=required` a missing one fails the test with what to do.
pub fn browser() -> Option<(PathBuf, PathBuf)> {
    let asked = std::env::var("RETRYSIM_BROWSER").ok();
    if asked.as_deref() == Some("none") {
        eprintln!("browser checks NOT RUN: RETRYSIM_BROWSER=none");
        return None;
    }
    match browser_deps() {
        Ok(found) => Some(found),
        Err(missing) if asked.as_deref() == Some("required") => {
            panic!("{missing} (RETRYSIM_BROWSER=required)")
        }
        Err(missing) => {
            // Straight to stderr, past the test harness's capture: loud even when it passes.
            let _ = writeln!(
                std::io::stderr(),
                "browser checks NOT RUN: {missing}; run .ci/browser-deps to run them \
                 (RETRYSIM_BROWSER=required makes this a failure)"
            );
            None
        }
    }
}

/// Headless Chromium and the Mermaid bundle, or what is missing and how to get it.
fn browser_deps() -> Result<(PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("RETRYSIM_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| on_path(&["chromium", "chromium-browser", "google-chrome"]))
        .ok_or_else(|| {
            "no headless Chromium: install Debian's chromium (.ci/browser-deps does), or set \
             RETRYSIM_CHROMIUM=path"
                .to_string()
        })?;
    let mermaid = std::env::var_os("RETRYSIM_MERMAID_JS")
        .map(PathBuf::from)
        .unwrap_or_else(|| browser_dir().join("mermaid.min.js"));
    if !mermaid.is_file() {
        return Err(format!(
            "no Mermaid bundle at {}: run .ci/browser-deps, or set RETRYSIM_MERMAID_JS=path",
            mermaid.display()
        ));
    }
    Ok((chromium, mermaid))
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs headless Chromium on `page` with `extra` arguments; returns its standard output.
fn chromium(browser: &Path, page: &Path, extra: &[&str]) -> String {
    let url = format!("file://{}", page.display());
    let output = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("chromium writes UTF-8")
}

/// The JSON a test script left in the attribute `name` of the dumped DOM's body.
fn body_attribute(dom: &str, name: &str) -> Value {
    let start = dom
        .find(&format!("{name}=\""))
        .unwrap_or_else(|| panic!("no {name} in the DOM: the test script did not run"));
    let rest = &dom[start + name.len() + 2..];
    let quoted = &rest[..rest.find('"').expect("a closing quote")];
    let text = quoted
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&text).expect("the test script writes JSON")
}

/// Collects console errors and uncaught exceptions from the start of the page.
const BEFORE_PAGE: &str = "<script>window.__errors=[];\
window.addEventListener('error',function(e){window.__errors.push(String(e.message));});\
var __error=console.error;console.error=function(){\
window.__errors.push(Array.prototype.join.call(arguments,' '));__error.apply(console,arguments);};\
</script>";

/// After the page's own script: presses the right arrow and reports what the DOM shows.
const AFTER_PAGE: &str = "<script>(function(){\
var rows=Array.prototype.slice.call(document.querySelectorAll('tr.event'));\
var at=function(){return rows.indexOf(document.querySelector('tr.event.current'));};\
var before=at();\
document.dispatchEvent(new KeyboardEvent('keydown',{key:'ArrowRight'}));var after=at();\
document.getElementById('next').click();var clicked=at();\
var violations=Array.prototype.map.call(document.querySelectorAll('.violation'),\
function(p){return p.textContent;});\
document.body.setAttribute('data-selftest',JSON.stringify({rows:rows.length,before:before,\
after:after,clicked:clicked,counter:document.getElementById('counter').textContent,\
knows:document.getElementById('knows').textContent,violations:violations,\
ready:document.body.dataset.ready||null,errors:window.__errors,\
messages:document.querySelectorAll('tr.event[data-from]').length,\
arrows:document.querySelectorAll('svg.arrows line.message').length,\
loaded_ms:Math.round(performance.now())}));})();</script>";

/// A faulty handler's shortest failure, with the invariant that catches it.
type Failure = (&'static HandlerEntry, Shrunk, String);

/// Every faulty handler's shortest failure.
fn shortest_failures() -> Vec<Failure> {
    models::handlers()
        .iter()
        .filter_map(|entry| match entry.declared {
            Declared::Faulty { caught_by } => Some((entry, caught_by)),
            Declared::Correct => None,
        })
        .map(|(entry, caught_by)| {
            let shrunk = shortest_failure_in(entry.domain, entry.handler, caught_by);
            (entry, shrunk, caught_by.to_string())
        })
        .collect()
}

/// The pictures of every faulty handler's shortest failure, in headless Chromium: its page
/// (below) and its Mermaid diagram (further below). One test, so that the failures are found
/// once.
#[test]
fn every_failure_picture_works_in_a_headless_browser() {
    let Some((browser, mermaid)) = browser() else {
        return;
    };
    let failures = shortest_failures();
    pages_work(&browser, &failures);
    diagrams_render(&browser, &mermaid, &failures);
    matrix_page_works(&browser);
}

/// The matrix page (`retrysim report --out DIR`'s `index.html`), for every built-in handler
/// over a few seeds: in the browser, one row per handler and one link per failing cell, with
/// nothing logged as an error; saved as screenshots too.
fn matrix_page_works(browser: &Path) {
    let seeds = 0..200;
    let rows: Vec<MatrixRow<'_>> = models::handlers()
        .iter()
        .map(|entry| MatrixRow {
            entry,
            exploration: explore(
                &entry.build,
                seeds.clone(),
                &entry.bounds_from(Bounds::default()),
                2,
            ),
            applicable: (entry.build)().invariants(),
        })
        .collect();
    let failing: usize = rows
        .iter()
        .map(|row| row.exploration.violations.len())
        .sum();
    assert!(failing > 0);
    let page = html::matrix_page(&rows, &seeds);
    let dir = browser_dir();
    std::fs::create_dir_all(dir.join("screenshots")).unwrap();
    let plain = dir.join("matrix.html");
    std::fs::write(&plain, &page).unwrap();
    let counted = "<script>(function(){document.body.setAttribute('data-selftest',JSON.stringify({\
rows:document.querySelectorAll('tbody tr').length,\
links:document.querySelectorAll('td.bad a[href$=\".html\"]:not([href$=\"-diagram.html\"])').length,\
diagrams:document.querySelectorAll('td.bad a[href$=\"-diagram.html\"]').length,\
overflow:Math.max(document.documentElement.scrollWidth-window.innerWidth,\
document.querySelector('.wrap').scrollWidth-document.querySelector('.wrap').clientWidth),\
errors:window.__errors}));})();</script>";
    let tested = page
        .replacen("<head>", &format!("<head>{BEFORE_PAGE}"), 1)
        .replacen("</body>", &format!("{counted}</body>"), 1);
    let test_page = dir.join("matrix.selftest.html");
    std::fs::write(&test_page, tested).unwrap();
    let seen = body_attribute(
        &chromium(
            browser,
            &test_page,
            &["--dump-dom", "--window-size=1280,800"],
        ),
        "data-selftest",
    );
    // At the desktop size the whole matrix fits, its last column included.
    assert!(
        seen["overflow"].as_i64().is_some_and(|px| px <= 0),
        "{seen}"
    );
    assert_eq!(seen["rows"], rows.len(), "{seen}");
    assert_eq!(seen["links"], failing, "{seen}");
    assert_eq!(seen["diagrams"], failing, "{seen}");
    assert_eq!(seen["errors"], Value::Array(Vec::new()), "{seen}");
    for (size, window) in [("desktop", "1280,800"), ("phone", "390,844")] {
        let shot = dir.join("screenshots").join(format!("matrix-{size}.png"));
        let window_size = format!("--window-size={window}");
        let screenshot = format!("--screenshot={}", shot.display());
        chromium(browser, &plain, &[&window_size, &screenshot]);
        assert!(std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0) > 10_000);
    }
}

/// Every faulty handler's shortest failure as an HTML page, in headless Chromium: the page's
/// script runs, there is one row per timeline row and one SVG arrow per message, the
/// violation is shown, the arrow key and
/// the next button move the highlighted step and the counter, and nothing is logged as an
/// error. One page per domain is also saved as screenshots, at 1280×800 and phone size.
fn pages_work(browser: &Path, failures: &[Failure]) {
    let pages = browser_dir().join("pages");
    let shots = browser_dir().join("screenshots");
    std::fs::create_dir_all(&pages).unwrap();
    std::fs::create_dir_all(&shots).unwrap();
    let mut domains_shot = Vec::new();
    for (entry, shrunk, invariant) in failures {
        let name = format!("{}-{}", entry.domain, entry.handler);
        let page = html::run_html(entry, &shrunk.bounds, &shrunk.outcome);
        let plain = pages.join(format!("{name}.html"));
        std::fs::write(&plain, &page).unwrap();
        let tested = page
            .replacen("<head>", &format!("<head>{BEFORE_PAGE}"), 1)
            .replacen("</body>", &format!("{AFTER_PAGE}</body>"), 1);
        let test_page = pages.join(format!("{name}.selftest.html"));
        std::fs::write(&test_page, tested).unwrap();
        let dom = chromium(browser, &test_page, &["--dump-dom"]);
        let seen = body_attribute(&dom, "data-selftest");
        let timeline = shrunk.outcome.timeline.as_ref().unwrap();
        let rows = timeline.rows.len();
        assert_eq!(seen["ready"], "true", "{name}: {seen}");
        assert_eq!(seen["rows"], rows, "{name}: {seen}");
        assert_eq!(seen["errors"], Value::Array(Vec::new()), "{name}: {seen}");
        let messages = seen["messages"].as_u64().unwrap();
        assert!(messages > 0, "{name}: no message drawn: {seen}");
        assert_eq!(
            seen["arrows"], messages,
            "{name}: one SVG arrow per message"
        );
        assert_eq!(
            (&seen["before"], &seen["after"]),
            (&0.into(), &1.into()),
            "{name}"
        );
        assert_eq!(seen["clicked"], 2.min(rows - 1), "{name}: {seen}");
        let counter = format!("event {} of {rows}", 3.min(rows));
        assert!(
            seen["counter"].as_str().unwrap().starts_with(&counter),
            "{name}: {seen}"
        );
        eprintln!(
            "{name}: {} bytes, {rows} rows, script done {} ms after navigation",
            page.len(),
            seen["loaded_ms"]
        );
        let shown = seen["violations"].to_string();
        assert!(
            shown.contains(&format!("VIOLATED {invariant}")),
            "{name}: {seen}"
        );
        if !domains_shot.contains(&entry.domain) {
            domains_shot.push(entry.domain);
            for (size, window) in [("desktop", "1280,800"), ("phone", "390,844")] {
                let shot = shots.join(format!("{name}-{size}.png"));
                let window_size = format!("--window-size={window}");
                let screenshot = format!("--screenshot={}", shot.display());
                chromium(browser, &plain, &[&window_size, &screenshot]);
                let bytes = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
                assert!(bytes > 10_000, "{}: {bytes} bytes", shot.display());
            }
        }
    }
    assert_eq!(
        domains_shot,
        ["counter", "interval", "reservation", "payment"]
    );
}

/// Every faulty handler's shortest failure as a Mermaid diagram, rendered by Mermaid in
/// headless Chromium: each one gives an SVG with no parse error. A broken diagram among them
/// must fail, so the check can.
fn diagrams_render(browser: &Path, mermaid: &Path, failures: &[Failure]) {
    let mut diagrams: Vec<(String, String)> = failures
        .iter()
        .map(|(entry, shrunk, _)| {
            let name = format!("{}-{}", entry.domain, entry.handler);
            (
                name,
                report::run_mermaid(entry, &shrunk.bounds, &shrunk.outcome),
            )
        })
        .collect();
    diagrams.push((
        "broken".to_string(),
        "sequenceDiagram\n    c1->>>>server: ((".to_string(),
    ));
    let texts: Vec<&str> = diagrams.iter().map(|(_, text)| text.as_str()).collect();
    let page = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><script src=\"{}\"></script>\
         </head><body><div id=\"out\"></div><script>\
         var diagrams={};mermaid.initialize({{startOnLoad:false}});\
         (async function(){{var results=[];for(var i=0;i<diagrams.length;i++){{\
         try{{var r=await mermaid.render('d'+i,diagrams[i]);\
         results.push(r.svg.indexOf('<svg')>=0?'svg':'no svg');\
         document.getElementById('out').insertAdjacentHTML('beforeend',r.svg);}}\
         catch(e){{results.push('error: '+String(e&&e.message||e));}}}}\
         document.body.setAttribute('data-results',JSON.stringify(results));}})();\
         </script></body></html>",
        mermaid.display(),
        serde_json::to_string(&texts).unwrap()
    );
    let dir = browser_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mermaid.html");
    std::fs::write(&file, page).unwrap();
    let dom = chromium(
        browser,
        &file,
        &["--virtual-time-budget=30000", "--dump-dom"],
    );
    let results = body_attribute(&dom, "data-results");
    let results = results.as_array().expect("one result per diagram");
    assert_eq!(results.len(), diagrams.len());
    for ((name, _), result) in diagrams.iter().zip(results) {
        if name == "broken" {
            assert!(result.as_str().unwrap().starts_with("error"), "{result}");
        } else {
            assert_eq!(result, "svg", "{name}");
        }
    }
}
