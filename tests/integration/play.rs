//! Playing a run by hand ([`retrysim::play`]): the choices offered in words, the run judged
//! as it goes, and every position the replay of its tape.

use crate::subject;
use retrysim::{
    follow, goal_met, play, replay, shortest_breaking, workload_answers, Bounds, ChoiceKind,
    ClientPolicy, Invariant, PlayError, Played, Subject, Tape,
};

/// Plays as a student with a plan: at each choice, the answer whose words hold the plan's
/// next phrase when one does (the plan then moves on), else the uneventful first answer;
/// from the smallest workload until the run judged so far breaks `invariant` (or is over,
/// or 80 choices were made). Returns the choices made and every position passed.
pub fn play_by_plan(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    plan: &[&str],
    invariant: Invariant,
) -> (usize, Vec<Played>) {
    let mut answers = workload_answers(subject, &Tape::default(), bounds).unwrap();
    let mut plan = plan.iter().peekable();
    let mut positions = Vec::new();
    for clicks in 0..80 {
        let played = play(subject, &answers, bounds, 0).unwrap();
        let broken = played.judged.violates(invariant);
        let Some(now) = played.now().cloned() else {
            positions.push(played);
            return (clicks, positions);
        };
        positions.push(played);
        if broken {
            return (clicks, positions);
        }
        let planned = plan
            .peek()
            .and_then(|phrase| now.words.iter().position(|words| words.contains(*phrase)));
        if planned.is_some() {
            plan.next();
        }
        answers.push(planned.unwrap_or(0) as u32);
    }
    panic!("80 choices and {invariant} still holds");
}

/// Plays as [`play_by_plan`] does, but where the plan has nothing to choose now, goes on to
/// the next choice that matters ([`Played::next_that_matters`]) unless that would pass a
/// choice that holds the plan's next phrase (then it takes the first answer, as a student who
/// knows what comes does). Returns the presses (choices and goings-on) and the last position.
pub fn play_by_plan_going_on(
    subject: &mut dyn Subject,
    bounds: &Bounds,
    plan: &[&str],
    invariant: Invariant,
) -> (usize, Played) {
    let mut answers = workload_answers(subject, &Tape::default(), bounds).unwrap();
    let mut plan = plan.iter().peekable();
    for presses in 0..80 {
        let played = play(subject, &answers, bounds, 0).unwrap();
        let Some(now) = played.now().cloned() else {
            return (presses, played);
        };
        if played.judged.violates(invariant) {
            return (presses, played);
        }
        let planned = plan
            .peek()
            .and_then(|phrase| now.words.iter().position(|words| words.contains(*phrase)));
        if let Some(answer) = planned {
            plan.next();
            answers.push(answer as u32);
            continue;
        }
        let gone_on = played.next_that_matters().unwrap();
        let passed = play(subject, &gone_on, bounds, 0).unwrap();
        let passes_the_plan = plan.peek().is_some_and(|phrase| {
            passed.asked[answers.len()..gone_on.len()]
                .iter()
                .any(|asked| asked.words.iter().any(|words| words.contains(*phrase)))
        });
        if passes_the_plan {
            answers.push(0);
        } else {
            answers = gone_on;
        }
    }
    panic!("80 presses and {invariant} still holds");
}

/// A lesson: a domain, handler and client, the student's plan, what it breaks, and in how
/// many choices from the smallest workload.
pub struct Lesson {
    pub domain: &'static str,
    pub handler: &'static str,
    pub client: ClientPolicy,
    pub plan: &'static [&'static str],
    pub breaks: Invariant,
    pub clicks: usize,
    /// The presses that break it with "go on to the next choice that matters" beside the
    /// choices ([`play_by_plan_going_on`]).
    pub presses: usize,
    pub faults_max: u32,
    /// The faults its run spends.
    pub faults: u32,
}

impl Lesson {
    fn bounds(&self) -> Bounds {
        Bounds {
            client: self.client,
            faults_max: self.faults_max,
            ..Bounds::default()
        }
    }
}

/// The lessons of docs/teaching.md.
pub const LESSONS: [Lesson; 4] = [
    // A timeout is not a verdict: with no fault at all, c1 times out before its request
    // arrives, backs off, sends it again, and both arrive.
    Lesson {
        domain: "counter",
        handler: "naive",
        client: ClientPolicy::Faithful,
        plan: &[
            "let time pass to 1000 ms",
            "let time pass to 1100 ms",
            "c1 sends A#2",
        ],
        breaks: Invariant::AtMostOnceEffect,
        clicks: 5,
        presses: 5,
        faults_max: 0,
        faults: 0,
    },
    Lesson {
        domain: "counter",
        handler: "naive",
        client: ClientPolicy::Faithful,
        plan: &["lose reply A#1"],
        breaks: Invariant::AtMostOnceEffect,
        clicks: 11,
        presses: 5,
        faults_max: 3,
        faults: 1,
    },
    Lesson {
        domain: "interval",
        handler: "version-only",
        client: ClientPolicy::Faithful,
        plan: &["lose reply A#1"],
        breaks: Invariant::OutcomeAgreement,
        clicks: 18,
        presses: 6,
        faults_max: 3,
        faults: 1,
    },
    // Without the status lookup: after the reconnect the client makes a new request id.
    Lesson {
        domain: "reservation",
        handler: "action-record",
        client: ClientPolicy::FreshId,
        plan: &["lose reply A#1", "reconnects"],
        breaks: Invariant::AtMostOnceEffect,
        clicks: 17,
        presses: 5,
        faults_max: 3,
        faults: 2,
    },
];

#[test]
fn each_lesson_breaks_its_invariant_by_choosing_in_the_choices_counted() {
    for lesson in &LESSONS {
        let (domain, handler, invariant) = (lesson.domain, lesson.handler, lesson.breaks);
        let mut subject = subject(domain, handler);
        let bounds = lesson.bounds();
        let (clicks, positions) = play_by_plan(&mut *subject, &bounds, lesson.plan, invariant);
        let last = positions.last().unwrap();
        assert!(last.judged.violates(invariant), "{domain}/{handler}");
        assert_eq!(clicks, lesson.clicks, "{domain}/{handler}");
        // The faults are the plan's, no more.
        assert_eq!(
            last.judged.faults.total(),
            lesson.faults,
            "{domain}/{handler}"
        );
        // Before the last choice, the invariant still held.
        let before = &positions[positions.len() - 2];
        assert!(!before.judged.violates(invariant), "{domain}/{handler}");
    }
}

/// "Go on to the next choice that matters" passes arrivals, kept sessions and crash points:
/// each lesson breaks in no more presses than choices (lesson 1's are all orders and times),
/// lesson 3 in 8 at most, with the same faults as by choosing one at a time.
#[test]
fn each_lesson_breaks_in_the_presses_counted_going_on_to_what_matters() {
    let mut counted = Vec::new();
    for lesson in &LESSONS {
        let (domain, handler, invariant) = (lesson.domain, lesson.handler, lesson.breaks);
        let mut subject = subject(domain, handler);
        let bounds = lesson.bounds();
        let (presses, last) = play_by_plan_going_on(&mut *subject, &bounds, lesson.plan, invariant);
        assert!(last.judged.violates(invariant), "{domain}/{handler}");
        assert!(presses <= lesson.clicks, "{domain}/{handler}");
        counted.push(presses);
        assert_eq!(
            last.judged.faults.total(),
            lesson.faults,
            "{domain}/{handler}"
        );
    }
    let expected: Vec<usize> = LESSONS.iter().map(|lesson| lesson.presses).collect();
    assert_eq!(counted, expected);
    assert!(LESSONS[2].presses <= 8);
}

/// Going on from a position answers 0 to the choice now and to every arrival, kept session
/// and crash point after it, and stops at the next delivery order or time: it is the same
/// run as answering each of them 0, one at a time.
#[test]
fn going_on_stops_at_the_next_order_or_time_and_passes_only_uneventful_answers() {
    let mut subject = subject("interval", "version-only");
    let bounds = Bounds::default();
    let start = workload_answers(&mut *subject, &Tape::default(), &bounds).unwrap();
    let played = play(&mut *subject, &start, &bounds, 0).unwrap();
    let gone_on = played.next_that_matters().unwrap();
    assert!(gone_on[..start.len()] == start[..]);
    assert!(gone_on[start.len()..].iter().all(|&answer| answer == 0));
    let there = play(&mut *subject, &gone_on, &bounds, 0).unwrap();
    // The request delivered, its arrival and the six crash points passed: the reply next.
    assert_eq!(gone_on.len() - start.len(), 8);
    let now = there.now().unwrap();
    assert_eq!(now.kind, ChoiceKind::Schedule);
    assert!(
        now.words[0].starts_with("deliver reply A#1"),
        "{:?}",
        now.words
    );
    for passed in &there.asked[start.len() + 1..gone_on.len()] {
        assert!(
            matches!(passed.kind, ChoiceKind::Fault | ChoiceKind::Crash),
            "{passed:?}"
        );
    }
    // A run that is over has nothing to go on to.
    let answers = play(&mut *subject, &gone_on, &bounds, 0).unwrap().to_end();
    let over = play(&mut *subject, &answers, &bounds, 0).unwrap();
    assert!(over.now().is_none());
    assert_eq!(over.next_that_matters(), None);
}

/// A run found within other bounds (the check's shortest, with no fault allowed, so none of
/// its choices offers one) is followed within the page's (faults allowed: a fault choice at
/// every delivery): the same story, row by row, its extra choices answered 0.
#[test]
fn a_run_found_within_other_bounds_is_followed_within_the_pages() {
    let mut subject = subject("counter", "naive");
    let bounds = Bounds {
        faults_max: 3,
        ..Bounds::default()
    };
    let start = workload_answers(&mut *subject, &Tape::default(), &bounds).unwrap();
    let invariant = Invariant::AtMostOnceEffect;
    let shrunk = shortest_breaking(&mut *subject, &bounds, start, (invariant, 0)).unwrap();
    assert_eq!(shrunk.bounds.faults_max, 0);
    let whole = play(&mut *subject, shrunk.tape.answers(), &shrunk.bounds, 0)
        .unwrap()
        .to_end();
    let there = play(&mut *subject, &whole, &shrunk.bounds, 0).unwrap();
    let followed = follow(&mut *subject, &there.asked, &bounds);
    assert!(followed.len() > whole.len(), "{followed:?} {whole:?}");
    let again = replay(&mut *subject, &Tape::from_answers(followed), &bounds).unwrap();
    assert!(again.violates(invariant));
    assert_eq!(again.faults.total(), 0);
    let rows = |outcome: &retrysim::RunOutcome| outcome.timeline.as_ref().unwrap().rows.clone();
    assert_eq!(rows(&again), rows(&shrunk.outcome));
}

#[test]
fn every_position_is_the_replay_of_its_tape() {
    for lesson in &LESSONS {
        let (domain, handler) = (lesson.domain, lesson.handler);
        let mut subject = subject(domain, handler);
        let bounds = lesson.bounds();
        let (_, positions) = play_by_plan(&mut *subject, &bounds, lesson.plan, lesson.breaks);
        for played in &positions {
            let judged_bounds = played.judged_bounds(&bounds);
            let replayed = replay(&mut *subject, &played.judged.tape, &judged_bounds).unwrap();
            assert_eq!(
                replayed.timeline, played.judged.timeline,
                "{domain}/{handler}"
            );
            assert_eq!(replayed.violations, played.judged.violations);
            // The same answers again: the same position, choices and words.
            let again = play(&mut *subject, &played.answers(), &bounds, 0).unwrap();
            assert_eq!(again.asked, played.asked);
            assert_eq!(again.rows, played.rows);
            assert_eq!(again.judged.timeline, played.judged.timeline);
        }
    }
}

#[test]
fn the_choices_are_the_engines_in_words_with_the_seeds_pick_marked() {
    let mut subject = subject("counter", "naive");
    let bounds = Bounds::default();
    let start = workload_answers(&mut *subject, &Tape::default(), &bounds).unwrap();
    let played = play(&mut *subject, &start, &bounds, 0).unwrap();
    let workload = &played.asked[0];
    assert_eq!(workload.kind, ChoiceKind::Workload);
    assert_eq!(workload.words[1], "the workload has 2 client(s)");
    let now = played.now().unwrap();
    assert_eq!(now.kind, ChoiceKind::Schedule);
    assert_eq!(
        now.words,
        [
            "deliver request A#1 to the server: e1 +5",
            "let time pass to 1000 ms: c1's timeout on A#1"
        ]
    );
    assert!(!now.within_step);
    // c1's send was step 1: nothing else happened yet, and nothing is broken.
    assert_eq!(played.rows.len(), 1);
    assert_eq!(played.stopped_after_steps, Some(1));
    assert!(played.judged.violations.is_empty());
    // Delivering it asks its fate inside step 2: the run is judged after step 1.
    let mut answers = start.clone();
    answers.push(0);
    let played = play(&mut *subject, &answers, &bounds, 0).unwrap();
    let now = played.now().unwrap();
    assert_eq!(now.kind, ChoiceKind::Fault);
    assert!(now.within_step);
    assert_eq!(
        now.words[1],
        "lose request A#1 on the way (a fault: a drop)"
    );
    assert_eq!(played.stopped_after_steps, Some(1));
    // The seed's pick is the seeded source's answer: seed 0 answers the fate 0.
    assert_eq!(now.seeded, 0);
    let seeded = retrysim::run_seed(&mut *subject, 0, &bounds, false);
    let by_seed = play(&mut *subject, seeded.tape.answers(), &bounds, 0).unwrap();
    for asked in by_seed.asked.iter().filter(|asked| asked.answer.is_some()) {
        assert_eq!(
            Some(asked.seeded),
            asked.answer,
            "the seed's own run takes its picks"
        );
    }
}

#[test]
fn answers_that_do_not_fit_are_refused_in_one_line() {
    let mut subject = subject("counter", "naive");
    let bounds = Bounds::default();
    let error = play(&mut *subject, &[5], &bounds, 0).unwrap_err();
    assert_eq!(
        error,
        PlayError::Misfit {
            choice: 1,
            answer: 5,
            options: 2
        }
    );
    assert_eq!(
        error.to_string(),
        "answer 5 to choice 1 does not fit: that choice has answers 0 to 1"
    );
    let too_many = vec![0; 300];
    let error = play(&mut *subject, &too_many, &bounds, 0).unwrap_err();
    assert!(
        matches!(error, PlayError::PastEnd { given: 300, .. }),
        "{error}"
    );
}

#[test]
fn a_run_played_to_its_end_says_its_verdict() {
    let mut subject = subject("counter", "keyed-sqlite");
    let bounds = Bounds::default();
    let mut answers = workload_answers(&mut *subject, &Tape::default(), &bounds).unwrap();
    let played = loop {
        let played = play(&mut *subject, &answers, &bounds, 0).unwrap();
        if played.now().is_none() {
            break played;
        }
        answers.push(0);
    };
    assert_eq!(played.stopped_after_steps, None);
    assert_eq!(played.judged.end, retrysim::RunEnd::Completed);
    assert!(played.judged.violations.is_empty());
    assert_eq!(played.rows, played.judged.timeline.as_ref().unwrap().rows);
}

#[test]
fn a_goal_is_met_and_compared_with_the_shortest_counterexample() {
    let mut naive = subject("counter", "naive");
    let bounds = Bounds::default();
    let (_, positions) = play_by_plan(
        &mut *naive,
        &bounds,
        &["lose reply A#1"],
        Invariant::AtMostOnceEffect,
    );
    let last = positions.last().unwrap();
    assert!(goal_met(&last.judged, Invariant::AtMostOnceEffect, 1));
    assert!(!goal_met(&last.judged, Invariant::AtMostOnceEffect, 0));
    let workload = workload_answers(&mut *naive, &Tape::default(), &bounds).unwrap();
    let shortest = shortest_breaking(
        &mut *naive,
        &bounds,
        workload,
        (Invariant::AtMostOnceEffect, 1),
    )
    .expect("counter/naive breaks at-most-once-effect with one fault");
    assert!(shortest.outcome.violates(Invariant::AtMostOnceEffect));
    // Shorter than the learner's: a timeout, with no fault at all.
    assert_eq!(shortest.outcome.faults.total(), 0);
    // A correct handler has none.
    let mut correct = subject("counter", "keyed-sqlite");
    assert!(shortest_breaking(
        &mut *correct,
        &bounds,
        Vec::new(),
        (Invariant::AtMostOnceEffect, 1)
    )
    .is_none());
}
