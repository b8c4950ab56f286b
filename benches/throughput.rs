//! Exploration throughput: runs per second for every built-in handler on one thread.
//!
//! Run with `cargo bench --bench throughput` (optionally `-- SEEDS` to change the count).

use retrysim::{explore, models, Bounds};
use std::time::Instant;

fn main() {
    let seeds: u64 = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(20_000);
    let bounds = Bounds::default();
    println!("runs/s on one thread, seeds 0..{seeds}, bounds: {bounds}");
    for entry in models::handlers() {
        // Warm up: open the store, fault in the code.
        explore(&entry.build, 0..200, &bounds, 1);
        let started = Instant::now();
        let exploration = explore(&entry.build, 0..seeds, &bounds, 1);
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "{:<28} {:>10.0} runs/s  ({} runs in {:.3} s, {} with a violation of some invariant)",
            format!("{}/{}", entry.domain, entry.handler),
            exploration.executions as f64 / elapsed,
            exploration.executions,
            elapsed,
            exploration
                .violations
                .iter()
                .map(|f| f.runs)
                .max()
                .unwrap_or(0),
        );
    }
}
