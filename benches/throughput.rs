//! Exploration throughput: runs per second for every built-in handler on one thread, then
//! exhaustive checks with and without state hashing.
//!
//! Run with `cargo bench --bench throughput` (optionally `-- SEEDS` to change the count).

use retrysim::{exhaust, explore, models, Bounds, CheckOptions, Reduction};
use std::time::Instant;

fn main() {
    let seeds: u64 = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(20_000);
    random_exploration(seeds);
    overlapping_invocations(seeds);
    exhaustive_checks();
}

/// The cost of interleaving: the same handlers with two invocations in progress at once
/// (each pause a scheduler step, each invocation a coroutine and a connection of its own)
/// against each running to its end.
fn overlapping_invocations(seeds: u64) {
    println!("\noverlapping invocations, one thread, seeds 0..{seeds} (runs/s):");
    for (domain, handler) in [("interval", "receipt"), ("counter", "keyed-sqlite")] {
        let entry = models::find(domain, handler).unwrap();
        let mut rates = Vec::new();
        for invocations_max in [1, 2] {
            let bounds = Bounds {
                invocations_max,
                ..Bounds::default()
            };
            explore(&entry.build, 0..200, &bounds, 1);
            let started = Instant::now();
            let exploration = explore(&entry.build, 0..seeds, &bounds, 1);
            rates.push(exploration.executions as f64 / started.elapsed().as_secs_f64());
        }
        println!(
            "  {:<36} sequential {:>8.0}  overlapping {:>8.0}  ({:.2}x slower)",
            format!("{domain}/{handler}"),
            rates[0],
            rates[1],
            rates[0] / rates[1]
        );
    }
}

fn random_exploration(seeds: u64) {
    let bounds = Bounds::default();
    println!("random exploration, one thread, seeds 0..{seeds}, bounds: {bounds}");
    for entry in models::handlers() {
        // Warm up: open the store, fault in the code.
        explore(&entry.build, 0..200, &bounds, 1);
        let started = Instant::now();
        let exploration = explore(&entry.build, 0..seeds, &bounds, 1);
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "  {:<36} {:>9.0} runs/s  ({} runs in {:.3} s)",
            format!("{}/{}", entry.domain, entry.handler),
            exploration.executions as f64 / elapsed,
            exploration.executions,
            elapsed,
        );
    }
}

fn exhaustive_checks() {
    // Larger bounds take minutes: counter/keyed-sqlite at (2, 1, 3, 2) exhausts in about
    // 160 s with state hashing.
    let cases = [
        ("counter", "keyed-memory", 2, 1, 3, 2),
        ("counter", "keyed-sqlite", 2, 1, 2, 1),
        ("interval", "receipt", 1, 1, 2, 1),
        ("reservation", "action-record", 2, 1, 2, 1),
    ];
    println!("\nexhaustive checks (clients, intents per client, attempts_max, faults_max):");
    for (domain, handler, clients_max, intents_max, attempts_max, faults_max) in cases {
        let entry = models::find(domain, handler).unwrap();
        let bounds = Bounds {
            clients_max,
            intents_max,
            attempts_max,
            faults_max,
            ..Bounds::default()
        };
        for reduction in [Reduction::States, Reduction::None] {
            let options = CheckOptions {
                reduction,
                runs_max: 1_000_000,
                ..CheckOptions::new(bounds)
            };
            let started = Instant::now();
            let report = exhaust(&mut *(entry.build)(), &options);
            let elapsed = started.elapsed().as_secs_f64();
            println!(
                "  {:<28} ({clients_max}, {intents_max}, {attempts_max}, {faults_max}) {:<7} {:>9} runs {:>8} states {:>8.2} s {:>8.0} runs/s  {:?}",
                format!("{domain}/{handler}"),
                format!("{reduction:?}"),
                report.runs(),
                report.unique_states(),
                elapsed,
                report.runs() as f64 / elapsed,
                report.stopped,
            );
        }
    }
}
