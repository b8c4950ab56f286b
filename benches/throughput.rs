//! Exploration throughput: runs per second for every built-in handler on one thread, then
//! exhaustive checks: with and without state hashing and checkpoints, at the bound that must
//! hold (two clients, three attempts, two faults), at a peer model checker's bound, and the
//! payment domain's correct handlers, and a handler of one's own with its time columns hashed
//! and left out, and real MCP servers in Python (the standard library's and the official
//! SDK's) with their process reused and restarted for each run.
//!
//! Run with `cargo bench --bench throughput` (optionally `-- SEEDS` to change the count, and
//! the names of the sections to run: random, timeouts, overlap, exhaustive, peer, real,
//! payment, time, mcp, play, classroom, relay).

/// Handlers written with `SqlHandler` alone, shared with the integration tests.
#[allow(dead_code)]
#[path = "../tests/integration/outside.rs"]
mod outside;

use retrysim::{
    exhaust, exhaust_on, explore, models, workload_answers, Bounds, CheckOptions, CheckReport,
    OnSql, Reduction, Simulator, Tape, Timeouts,
};
use std::time::Instant;

/// The allocator the `retrysim` command runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds: u64 = args
        .iter()
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(20_000);
    // Words name the sections to run (all when none is named); `--bench` is cargo's.
    let named: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|arg| arg.parse::<u64>().is_err() && !arg.starts_with('-'))
        .collect();
    let wanted = |section: &str| named.is_empty() || named.contains(&section);
    let sections: [(&str, &dyn Fn()); 12] = [
        ("random", &|| random_exploration(seeds)),
        ("timeouts", &|| timeout_models(seeds)),
        ("overlap", &|| overlapping_invocations(seeds)),
        ("exhaustive", &exhaustive_checks),
        ("peer", &peer_bound),
        ("real", &real_bounds),
        ("payment", &payment_checks),
        ("time", &time_columns),
        ("mcp", &mcp_servers),
        ("play", &play_positions),
        ("classroom", &classroom),
        ("relay", &relay_latency),
    ];
    for (name, section) in sections {
        if wanted(name) {
            section();
        }
    }
}

/// The payment domain's correct handlers at the bounds the suite holds them to, the outbox at
/// the bound that must hold with overlapping invocations (two clients with one intent each,
/// three attempts, two faults, two invocations at once), and both where two clients race on
/// one request id with overlapping invocations (the suite's bound for it).
fn payment_checks() {
    println!("\npayment checks (clients, intents per client, attempts_max, faults_max):");
    // The last field: a workload's tape, or none for every workload. The tape 2 draws c1
    // paying pay-1 and c2 reusing pay-1 for another amount.
    let cases = [
        ("lease-and-provider-key", 2, 1, 3, 1, 1, None),
        ("lease-and-provider-key", 1, 1, 3, 1, 2, None),
        ("outbox", 2, 1, 2, 1, 1, None),
        ("outbox", 2, 1, 3, 2, 2, None),
        ("lease-and-provider-key", 2, 1, 2, 1, 2, Some("2")),
        ("outbox", 2, 1, 2, 1, 2, Some("2")),
    ];
    for (handler, clients_max, intents_max, attempts_max, faults_max, invocations_max, tape) in
        cases
    {
        let entry = models::find("payment", handler).unwrap();
        let bounds = Bounds {
            invocations_max,
            ..entry.bounds_from(Bounds {
                clients_max,
                intents_max,
                attempts_max,
                faults_max,
                ..Bounds::default()
            })
        };
        let prefix = tape.map_or_else(Vec::new, |tape: &str| {
            let tape: Tape = tape.parse().unwrap();
            workload_answers(&mut *(entry.build)(), &tape, &bounds).unwrap()
        });
        // The outbox at two faults with overlapping invocations takes about 29 million runs.
        let options = CheckOptions {
            runs_max: 40_000_000,
            prefix,
            ..CheckOptions::new(bounds)
        };
        let raced = if tape.is_some() { ", one id raced" } else { "" };
        let label = format!("invocations {invocations_max}{raced}");
        timed_check("payment", handler, &options, &label);
    }
}

/// Timed timeouts (the default) against untimed ones: random exploration of the correct
/// counter and interval handlers, and the bound that must hold (two clients with one intent
/// each, three attempts, two faults) for every correct handler.
fn timeout_models(seeds: u64) {
    println!(
        "
timed against untimed timeouts, one thread:"
    );
    for (domain, handler) in [("counter", "keyed-sqlite"), ("interval", "receipt")] {
        let entry = models::find(domain, handler).unwrap();
        let rates: Vec<f64> = [Timeouts::Timed, Timeouts::Untimed]
            .into_iter()
            .map(|timeouts| {
                let bounds = Bounds {
                    timeouts,
                    ..Bounds::default()
                };
                explore(&entry.build, 0..200, &bounds, 1);
                let started = Instant::now();
                let exploration = explore(&entry.build, 0..seeds, &bounds, 1);
                exploration.executions as f64 / started.elapsed().as_secs_f64()
            })
            .collect();
        println!(
            "  {:<36} seeds 0..{seeds}: timed {:>8.0} runs/s  untimed {:>8.0} runs/s",
            format!("{domain}/{handler}"),
            rates[0],
            rates[1]
        );
    }
    for entry in models::handlers()
        .iter()
        .filter(|entry| entry.declared == models::Declared::Correct)
    {
        for timeouts in [Timeouts::Timed, Timeouts::Untimed] {
            // With the handler's own invocation bound and platform limit (the payment
            // handlers' 3 s).
            let bounds = entry.bounds_from(Bounds {
                clients_max: 2,
                intents_max: 1,
                attempts_max: 3,
                faults_max: 2,
                timeouts,
                ..Bounds::default()
            });
            let options = CheckOptions {
                runs_max: 20_000_000,
                ..CheckOptions::new(bounds)
            };
            timed_check(entry.domain, entry.handler, &options, timeouts.name());
        }
    }
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
    println!("\nexhaustive checks (clients, intents per client, attempts_max, faults_max):");
    // Small bounds: state hashing against plain enumeration, and resuming runs from
    // checkpoints against replaying each from its start.
    let small = [
        ("counter", "keyed-sqlite", 2, 1, 2, 1),
        ("interval", "receipt", 1, 1, 2, 1),
        ("reservation", "action-record", 2, 1, 2, 1),
    ];
    for (domain, handler, clients_max, intents_max, attempts_max, faults_max) in small {
        let bounds = Bounds {
            clients_max,
            intents_max,
            attempts_max,
            faults_max,
            ..Bounds::default()
        };
        for (reduction, checkpoints) in [
            (Reduction::ALL, true),
            (Reduction::ALL, false),
            (Reduction::NONE, true),
        ] {
            let options = CheckOptions {
                reduction,
                runs_max: 1_000_000,
                checkpoints,
                ..CheckOptions::new(bounds)
            };
            let label = format!("{}, checkpoints {checkpoints}", reduction.names());
            timed_check(domain, handler, &options, &label);
        }
    }
    // The bound that must hold: two clients with one intent each, three attempts, two faults;
    // plain enumeration for the reduction ratio (it does not finish its first level).
    println!();
    for (domain, handler) in [("counter", "keyed-sqlite"), ("interval", "receipt")] {
        let bounds = Bounds {
            clients_max: 2,
            intents_max: 1,
            attempts_max: 3,
            faults_max: 2,
            ..Bounds::default()
        };
        let must_hold = CheckOptions {
            runs_max: 20_000_000,
            ..CheckOptions::new(bounds)
        };
        let reduced = timed_check(domain, handler, &must_hold, "all reductions");
        let plain = CheckOptions {
            reduction: Reduction::NONE,
            runs_max: 2_000_000,
            ..CheckOptions::new(bounds)
        };
        let plain = timed_check(domain, handler, &plain, "none");
        let first = |report: &CheckReport| report.levels.first().map_or(0, |l| l.runs);
        println!(
            "  {:<28} reduction at faults_max=0: {} plain runs unfinished against {} (more than {:.0}x)",
            format!("{domain}/{handler}"),
            first(&plain),
            first(&reduced),
            first(&plain) as f64 / first(&reduced).max(1) as f64,
        );
    }
}

/// The targets of exhaustive checking at real bounds, one thread unless said: the default
/// bound (two clients with two intents each, three attempts, two faults), overlapping
/// invocations with two clients, each reduction's share, and two threads on one workload.
fn real_bounds() {
    println!("\nreal bounds, one thread unless said:");
    let default_bound = Bounds {
        faults_max: 2,
        ..Bounds::default()
    };
    for (domain, handler) in [
        ("counter", "keyed-sqlite"),
        ("reservation", "action-record"),
    ] {
        let options = CheckOptions {
            runs_max: 25_000_000,
            ..CheckOptions::new(default_bound)
        };
        timed_check(domain, handler, &options, "default bound, faults 2");
    }
    let overlap = CheckOptions::new(Bounds {
        clients_max: 2,
        intents_max: 1,
        attempts_max: 2,
        faults_max: 0,
        invocations_max: 2,
        ..Bounds::default()
    });
    timed_check("counter", "keyed-sqlite", &overlap, "invocations 2");
    let peer = peer_bounds(2);
    let with = |reduction: Reduction| CheckOptions {
        reduction,
        runs_max: 25_000_000,
        ..CheckOptions::new(peer)
    };
    for (reduction, label) in [
        (Reduction::STATES, "peer bound, states only"),
        (
            Reduction {
                crash_points: true,
                ..Reduction::STATES
            },
            "peer bound, + crash points",
        ),
        (
            Reduction {
                symmetry: true,
                ..Reduction::STATES
            },
            "peer bound, + symmetry",
        ),
        (
            Reduction {
                sleep_sets: true,
                ..Reduction::STATES
            },
            "peer bound, + sleep sets",
        ),
        (Reduction::ALL, "peer bound, all"),
    ] {
        timed_check("counter", "keyed-sqlite", &with(reduction), label);
    }
    let entry = models::find("counter", "keyed-sqlite").unwrap();
    let one_workload = CheckOptions {
        prefix: workload_answers(&mut *(entry.build)(), &"1".parse().unwrap(), &peer).unwrap(),
        ..CheckOptions::new(peer)
    };
    for threads in [1, 2] {
        let started = Instant::now();
        let report = exhaust_on(&entry.build, &one_workload, threads);
        println!(
            "  counter/keyed-sqlite peer bound, one workload, {threads} thread(s): {} runs {:.2} s",
            report.runs(),
            started.elapsed().as_secs_f64()
        );
    }
}

/// A peer model checker's bound with `clients_max` clients of one intent each: up to three
/// attempts, drops unbounded, at most two crashes and one duplicate.
fn peer_bounds(clients_max: u32) -> Bounds {
    Bounds {
        clients_max,
        intents_max: 1,
        attempts_max: 3,
        faults_max: 3,
        drops_max: Bounds::UNBOUNDED,
        crashes_max: 2,
        duplicates_max: 1,
        reconnects_max: 0,
        ..Bounds::default()
    }
}

/// A peer model checker's bound: two clients with one intent each, up to three attempts, drops
/// unbounded, at most two crashes and one duplicate. The peer checks one workload; so does the
/// first line of each handler here (c1 sends e1 +5, c2 sends e2 +5), then every workload.
/// The in-memory counter's one workload is checked without symmetry too, as the peer checks
/// it.
fn peer_bound() {
    let bounds = peer_bounds(2);
    println!("\nthe peer bound: {bounds}");
    for (domain, handler) in [
        ("counter", "keyed-memory"),
        ("counter", "keyed-atomic"),
        ("counter", "keyed-sqlite"),
    ] {
        let entry = models::find(domain, handler).unwrap();
        // The tape 1 draws two clients and, answering 0 after, the first events left.
        let tape: Tape = "1".parse().unwrap();
        let one_workload = CheckOptions {
            prefix: workload_answers(&mut *(entry.build)(), &tape, &bounds).unwrap(),
            runs_max: 20_000_000,
            ..CheckOptions::new(bounds)
        };
        timed_check(domain, handler, &one_workload, "one workload");
        if handler == "keyed-atomic" {
            // Like for like with the peer, which does not use symmetry: c1 and c2 send e1 +5
            // and e2 +5, so state symmetry halves the states.
            let without_symmetry = CheckOptions {
                reduction: Reduction {
                    symmetry: false,
                    ..Reduction::ALL
                },
                ..one_workload.clone()
            };
            timed_check(
                domain,
                handler,
                &without_symmetry,
                "one workload, no symmetry",
            );
        }
        let every_workload = CheckOptions {
            runs_max: 20_000_000,
            ..CheckOptions::new(bounds)
        };
        timed_check(domain, handler, &every_workload, "every workload");
    }
    // The peer's three-client bound, in memory: the tape 2 draws three clients.
    let three = peer_bounds(3);
    let entry = models::find("counter", "keyed-atomic").unwrap();
    let one_workload = CheckOptions {
        prefix: workload_answers(&mut *(entry.build)(), &"2".parse().unwrap(), &three).unwrap(),
        runs_max: 25_000_000,
        ..CheckOptions::new(three)
    };
    // One thread and two, alternately, three times each: the machine's speed moves from
    // minute to minute, and the fastest of each is the fairest pair.
    let mut alone_elapsed = f64::INFINITY;
    let mut shared_elapsed = f64::INFINITY;
    let mut reports = Vec::new();
    for _ in 0..3 {
        for threads in [1, 2] {
            let started = Instant::now();
            let report = exhaust_on(&entry.build, &one_workload, threads);
            let elapsed = started.elapsed().as_secs_f64();
            let fastest = if threads == 1 {
                &mut alone_elapsed
            } else {
                &mut shared_elapsed
            };
            *fastest = fastest.min(elapsed);
            reports.push(report);
        }
    }
    let alone = &reports[0];
    assert!(
        reports.iter().all(|report| report == alone),
        "two threads report what one reports"
    );
    let name = "counter/keyed-atomic";
    print_check((name, "three clients"), &three, alone, alone_elapsed);
    print_check(
        (name, "three clients, 2 threads"),
        &three,
        alone,
        shared_elapsed,
    );
    println!(
        "  two threads on one workload: {:.2} times one thread (each the fastest of three)",
        alone_elapsed / shared_elapsed
    );
}

/// A fenced lease on a schema of its own (`outside::TimedLease`) at two clients with a request
/// id each, three attempts and two faults: with its lease column hashed as it is, and declared
/// a time column (`SqlHandler::TIME_COLUMNS`), left out of state hashing.
fn time_columns() {
    println!("\ntime columns, a fenced lease of one's own (clients, intents per client, attempts_max, faults_max):");
    let bounds = Bounds {
        clients_max: 2,
        intents_max: 1,
        attempts_max: 3,
        faults_max: 2,
        ..Bounds::default()
    };
    let options = CheckOptions::new(bounds);
    let hashed = || Simulator::new(OnSql(outside::TimedLease::<true>));
    let left_out = || Simulator::new(OnSql(outside::TimedLease::<false>));
    let checks: [(&str, &dyn Fn() -> CheckReport); 2] = [
        ("lease column hashed", &|| exhaust(&mut hashed(), &options)),
        ("time column left out", &|| {
            exhaust(&mut left_out(), &options)
        }),
    ];
    for (label, check) in checks {
        let started = Instant::now();
        let report = check();
        let elapsed = started.elapsed().as_secs_f64();
        print_check(("fenced lease", label), &bounds, &report, elapsed);
    }
}

/// Checks `handler` of `domain` under `options` and prints its line.
fn timed_check(domain: &str, handler: &str, options: &CheckOptions, label: &str) -> CheckReport {
    check_timed(domain, handler, options, label).0
}

/// [`timed_check`], with the seconds it took.
fn check_timed(
    domain: &str,
    handler: &str,
    options: &CheckOptions,
    label: &str,
) -> (CheckReport, f64) {
    let entry = models::find(domain, handler).unwrap();
    let started = Instant::now();
    let report = exhaust(&mut *(entry.build)(), options);
    let elapsed = started.elapsed().as_secs_f64();
    let name = format!("{domain}/{handler}");
    print_check((&name, label), &options.bounds, &report, elapsed);
    (report, elapsed)
}

/// One line of a check's figures: what was checked, at which bound, its runs, states, time,
/// throughput and why it stopped.
fn print_check((name, label): (&str, &str), bounds: &Bounds, report: &CheckReport, elapsed: f64) {
    println!(
        "  {:<28} ({}, {}, {}, {}) {:<24} {:>9} runs {:>8} states {:>8.2} s {:>8.0} runs/s  {:?}",
        name,
        bounds.clients_max,
        bounds.intents_max,
        bounds.attempts_max,
        bounds.faults_max,
        label,
        report.runs(),
        report.unique_states(),
        elapsed,
        report.runs() as f64 / elapsed,
        report.stopped,
    );
}

/// Runs per second on real MCP servers: the standard library's counter in Python, one by one
/// and served on threads with two calls in flight at once, the plain HTTP counter endpoint, the SDK's interval tool (when
/// `.ci/mcp-sdk` has installed the SDK) and the counter in TypeScript (when `.ci/node` has
/// installed Node), with the server process
/// reused from run to run and restarted for each run, without crashes and with them (each
/// crash restarts the process: a Python start and the SDK's imports), and with a warm spare
/// that forks each start (`spare = true`); then the exhaustive
/// check of the seed's receipt server at (1 client, 1 intent, attempts 2, faults 1) on one
/// thread.
fn mcp_servers() {
    use retrysim::service::{OnService, Scenario};
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mcp");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let venv = target.join("mcp-sdk-venv/bin/python");
    let node = target.join("node-venv/bin/node");
    println!(
        "\nreal servers, MCP over stdio and plain HTTP (one thread; the first start not counted):"
    );
    let mut servers = vec![
        ("stdlib counter", "counter.toml"),
        ("threads, 2 calls", "counter_concurrent.toml"),
        ("HTTP counter", "../http/counter.toml"),
    ];
    if venv.exists() {
        std::env::set_var("RETRYSIM_MCP_PYTHON", &venv);
        servers.push(("SDK interval", "interval_sdk_receipt.toml"));
    } else {
        println!("  (the SDK server left out: run `bash .ci/mcp-sdk` to install the SDK)");
    }
    if node.exists() {
        std::env::set_var("RETRYSIM_NODE", &node);
        servers.push(("TS counter", "counter_ts.toml"));
    } else {
        println!("  (the TypeScript server left out: run `bash .ci/node` to install Node)");
    }
    let psycopg = target.join("psycopg-venv/bin/python");
    let postgres = psycopg.exists() && retrysim::postgres::bin_dir().is_ok();
    if postgres {
        std::env::set_var("RETRYSIM_PG_PYTHON", &psycopg);
        servers.push(("PostgreSQL counter", "../http/counter_pg.toml"));
    } else {
        println!(
            "  (the PostgreSQL service left out: run `bash .ci/postgres` and `bash .ci/psycopg`)"
        );
    }
    for (name, file) in servers {
        let scenario = Scenario::load(&std::path::Path::new(examples).join(file)).unwrap();
        let no_crashes = Bounds {
            crashes_max: 0,
            ..scenario.bounds
        };
        // The spare forks each start from a process held at the Python helper's import (the
        // TypeScript helper has no gate).
        let forks = !name.starts_with("TS");
        let cases = [
            ("reused, no crashes", true, no_crashes, 400, false),
            ("restarted, no crashes", false, no_crashes, 40, false),
            ("reused, crashes_max=2", true, scenario.bounds, 100, false),
            ("restarted, spare", false, no_crashes, 400, true),
            ("reused, crashes, spare", true, scenario.bounds, 400, true),
        ];
        for (how, reuse, bounds, runs, spare) in cases {
            if spare && !forks {
                continue;
            }
            let mut target = scenario.target.clone();
            target.reuse = reuse;
            target.spare = spare;
            let mut simulator = Simulator::new(OnService(target));
            let started = Instant::now();
            for seed in 0..runs {
                retrysim::run_seed(&mut simulator, seed, &bounds, false);
            }
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "  {name:<18} {how:<22} {runs:>4} runs  {:>7.1} runs/s",
                runs as f64 / seconds
            );
        }
    }
    let receipt =
        Scenario::load(&std::path::Path::new(examples).join("interval_receipt.toml")).unwrap();
    let started = Instant::now();
    let report = exhaust(
        &mut Simulator::new(OnService(receipt.target.clone())),
        &CheckOptions::new(receipt.bounds),
    );
    println!(
        "  check of the stdlib receipt server at (1, 1, 2, 1): {} runs, {} violations, {:.1} s",
        report.runs(),
        report.violations.len(),
        started.elapsed().as_secs_f64()
    );
    if postgres {
        postgres_race_check(examples);
    }
}

/// The exhaustive check of the PostgreSQL race example (the key looked up under READ
/// COMMITTED) at (2 clients, 1 intent, attempts 2, faults 1) on one thread, which stops at
/// the race's fault level.
fn postgres_race_check(examples: &str) {
    use retrysim::service::{OnService, Scenario};
    let path = std::path::Path::new(examples).join("../http/counter_pg_lookup.toml");
    let race = Scenario::load(&path).unwrap();
    let bounds = Bounds {
        clients_max: 2,
        intents_max: 1,
        attempts_max: 2,
        faults_max: 1,
        ..race.bounds
    };
    let started = Instant::now();
    let report = exhaust(
        &mut Simulator::new(OnService(race.target.clone())),
        &CheckOptions::new(bounds),
    );
    println!(
        "  check of the PostgreSQL lookup race at (2, 1, 2, 1): {} runs, {} violations, {:.1} s",
        report.runs(),
        report.violations.len(),
        started.elapsed().as_secs_f64()
    );
}

/// How long a click on the play page takes: positions computed per second (each is two runs,
/// traced: to the choice now, and judged so far) along a whole run answered 0 from the
/// smallest workload, for a built-in handler on SQLite and a real MCP server.
fn play_positions() {
    use retrysim::service::{OnService, Scenario};
    println!("\nplay: positions per second along one run (each two traced runs):");
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mcp");
    let scenario =
        Scenario::load(&std::path::Path::new(examples).join("counter_keyless.toml")).unwrap();
    let subjects: [(&str, Box<dyn retrysim::Subject>, Bounds); 3] = [
        (
            "counter/naive",
            (models::find("counter", "naive").unwrap().build)(),
            Bounds::default(),
        ),
        (
            "interval/receipt",
            (models::find("interval", "receipt").unwrap().build)(),
            Bounds::default(),
        ),
        (
            "MCP stdlib counter",
            Box::new(Simulator::new(OnService(scenario.target.clone()))),
            scenario.bounds,
        ),
    ];
    for (name, mut subject, bounds) in subjects {
        let mut answers = workload_answers(&mut *subject, &Tape::default(), &bounds).unwrap();
        let started = Instant::now();
        let mut positions = 0;
        loop {
            let played = retrysim::play(&mut *subject, &answers, &bounds, 0).unwrap();
            positions += 1;
            if played.now().is_none() {
                break;
            }
            answers.push(0);
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "  {name:<20} {positions:>3} positions  {:>8.1} positions/s  ({:.2} ms a click)",
            f64::from(positions) / seconds,
            seconds * 1000.0 / f64::from(positions)
        );
    }
}

/// Students playing at once on one play server in [`classroom`].
const STUDENTS: usize = 30;

/// A class on one play server: [`STUDENTS`] students play lesson 3 of docs/teaching.md
/// (`interval/version-only`, goal `outcome-agreement`) at once over HTTP, each first choice
/// by choice (the reply lost where it can be), then pressing "go on to the next choice that
/// matters" where the lesson has nothing to choose; the time of each click, median and 90th
/// percentile.
fn classroom() {
    use retrysim::play::{Goal, PlayServer, PlayTarget};
    println!(
        "\nclassroom: {STUDENTS} students on one play server, lesson 3 (interval/version-only):"
    );
    let server = PlayServer::bind(0).unwrap();
    let port = server.port();
    std::thread::spawn(move || {
        let entry = models::find("interval", "version-only").unwrap();
        let build = move || (entry.build)();
        let bounds = Bounds::default();
        let start = workload_answers(&mut *build(), &Tape::default(), &bounds).unwrap();
        let target = PlayTarget {
            title: entry.name(),
            bounds,
            seed: 0,
            start,
            goal: Some(Goal {
                invariant: retrysim::Invariant::OutcomeAgreement,
                faults_most: 1,
            }),
            replay: Box::new(|tape, _| format!("retrysim replay --tape {tape}")),
        };
        server.serve(&build, &target)
    });
    let students: Vec<_> = (0..STUDENTS)
        .map(|_| std::thread::spawn(move || a_student_plays_lesson_3(port)))
        .collect();
    let mut by_choice = Vec::new();
    let mut going_on = Vec::new();
    for student in students {
        let (chosen, gone_on) = student.join().unwrap();
        by_choice.extend(chosen);
        going_on.extend(gone_on);
    }
    for (how, mut clicks) in [("choice by choice", by_choice), ("going on", going_on)] {
        clicks.sort_by(f64::total_cmp);
        let at = |share: f64| clicks[((clicks.len() - 1) as f64 * share).round() as usize];
        println!(
            "  {how:<17} {:>4} clicks  median {:>6.1} ms  p90 {:>6.1} ms",
            clicks.len(),
            at(0.5),
            at(0.9)
        );
    }
}

/// Plays lesson 3 on the play server at `port` to its violation, twice: choice by choice,
/// then going on to the next choice that matters. Each click's time in ms, for each way.
fn a_student_plays_lesson_3(port: u16) -> (Vec<f64>, Vec<f64>) {
    let mut ways = [Vec::new(), Vec::new()];
    for (way, times) in ways.iter_mut().enumerate() {
        let mut state = play_request(port, "/state", times);
        while !state["now"].is_null()
            && state["judged"]["violations"].as_array().unwrap().is_empty()
        {
            let answers: Vec<String> = (state["answers"].as_array().unwrap().iter())
                .map(|answer| answer.to_string())
                .collect();
            let (answers, at) = (answers.join(","), state["at"].clone());
            let choices = state["now"]["choices"].as_array().unwrap();
            let word = |i: usize| choices[i]["words"].as_str().unwrap();
            let lose = (0..choices.len()).find(|&i| word(i).contains("lose reply A#1"));
            let path = match (lose, way) {
                (Some(lose), _) => format!("/choose?answers={answers}&at={at}&choice={lose}"),
                (None, 0) => format!("/choose?answers={answers}&at={at}&choice=0"),
                (None, _) if word(0).starts_with("deliver reply A#1") => {
                    format!("/choose?answers={answers}&at={at}&choice=0")
                }
                (None, _) => format!("/next?answers={answers}&at={at}"),
            };
            state = play_request(port, &path, times);
        }
    }
    let [chosen, gone_on] = ways;
    (chosen, gone_on)
}

/// One request to the play server at `port`, its time in ms pushed onto `times`: the JSON
/// it answers.
fn play_request(port: u16, path: &str, times: &mut Vec<f64>) -> serde_json::Value {
    use std::io::{Read, Write};
    // The wall clock times the click as a student waits on it; no run reads it.
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: here\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    times.push(started.elapsed().as_secs_f64() * 1000.0);
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}\n{body}");
    serde_json::from_str(body).unwrap()
}

/// The statements timed through the PostgreSQL relay, each way.
const RELAY_STATEMENTS: u32 = 2_000;

/// What the PostgreSQL relay adds to a statement: the same statements on one connection
/// straight to the cluster, through the relay unarmed (it only forwards), and through it armed
/// at its transactions' points, a side channel that answers `go` at once (a write on its own
/// asks twice: before it and after it).
fn relay_latency() {
    use retrysim::postgres::{PgClient, PgCluster, Relay, RelayPoints, PG_ROLE};
    println!(
        "\nPostgreSQL relay, microseconds a statement ({RELAY_STATEMENTS} each, one connection):"
    );
    if retrysim::postgres::bin_dir().is_err() {
        println!("  (left out: run `bash .ci/postgres`)");
        return;
    }
    let cluster = PgCluster::start().expect("a cluster starts");
    let setup = "CREATE TABLE items (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); \
                 INSERT INTO items VALUES (1, 0);";
    cluster.psql("postgres", setup).expect("the table is made");
    let scratch = retrysim::process::ScratchDir::create(
        std::env::temp_dir().join(format!("retrysim-bench-relay-{}", std::process::id())),
    )
    .expect("a scratch directory");
    let side_channel = scratch.path().join("points.sock");
    answer_go_at(&side_channel);
    let relay = Relay::start(
        &scratch.path().join("pg"),
        cluster.port(),
        &cluster.socket(),
        &side_channel,
        RelayPoints::Transactions,
    )
    .expect("the relay starts");
    let time = |socket_dir: &std::path::Path, sql: &str| {
        let mut client = PgClient::connect(socket_dir, cluster.port(), PG_ROLE, "postgres")
            .expect("a connection");
        let started = Instant::now();
        for _ in 0..RELAY_STATEMENTS {
            client.run(sql, sql).expect("the statement runs");
        }
        started.elapsed().as_secs_f64() * 1e6 / f64::from(RELAY_STATEMENTS)
    };
    for sql in [
        "SELECT n FROM items WHERE id = 1",
        "UPDATE items SET n = n + 1 WHERE id = 1",
    ] {
        let direct = time(cluster.socket_dir(), sql);
        relay.arm(false);
        let forwarded = time(relay.socket_dir(), sql);
        relay.arm(true);
        let asked = time(relay.socket_dir(), sql);
        println!(
            "  {sql:<42} direct {direct:>6.1}  relayed {forwarded:>6.1}  relayed and asked {asked:>6.1}"
        );
    }
}

/// A side channel at `path` that answers `go` to every point asked on it.
fn answer_go_at(path: &std::path::Path) {
    use std::io::{BufRead, Write};
    let listener = std::os::unix::net::UnixListener::bind(path).expect("the side channel binds");
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().expect("a second handle");
                for line in std::io::BufReader::new(stream)
                    .lines()
                    .map_while(Result::ok)
                {
                    if line.starts_with("point ") && writer.write_all(b"go\n").is_err() {
                        return;
                    }
                }
            });
        }
    });
}
