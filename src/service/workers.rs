//! Threads kept for the harness's short jobs: an HTTP exchange, the reader of a side-channel
//! connection, a provider's connection. A job goes to a kept thread that has finished its
//! last one, or to a new thread when none is free. A real server's run starts several such
//! jobs, and a new thread each is a clone, a stack and a wake-up more on the path of every
//! call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

/// A job for a kept thread.
type Job = Box<dyn FnOnce() + Send>;

/// How long a kept thread with nothing to do waits for a job before it ends.
const IDLE_WAIT: Duration = Duration::from_secs(5);

/// The kept threads with nothing to do: each one's number and the sender of its jobs.
static IDLE: Mutex<Vec<(u64, Sender<Job>)>> = Mutex::new(Vec::new());

/// How many kept threads have been started: each gets the count as its number.
static STARTED: AtomicU64 = AtomicU64::new(0);

/// Runs `job` on a kept thread with nothing to do, or on a new one.
pub(crate) fn run(job: impl FnOnce() + Send + 'static) {
    let mut job: Job = Box::new(job);
    loop {
        let free = IDLE.lock().expect("the idle threads").pop();
        let Some((_, jobs)) = free else { break };
        // A thread taken off the list waits for this job (see `work`): the send fails only
        // where it has panicked since.
        match jobs.send(job) {
            Ok(()) => return,
            Err(returned) => job = returned.0,
        }
    }
    let number = STARTED.fetch_add(1, Ordering::Relaxed) + 1;
    thread::spawn(move || work(number, job));
}

/// A kept thread: runs its jobs, offering itself for the next after each, until none comes
/// within [`IDLE_WAIT`].
fn work(number: u64, first: Job) {
    let (sender, jobs) = channel::<Job>();
    let mut job = first;
    loop {
        job();
        IDLE.lock()
            .expect("the idle threads")
            .push((number, sender.clone()));
        job = match next_job(number, &jobs) {
            Some(next) => next,
            None => return,
        };
    }
}

/// This thread's next job, or `None` once it has waited [`IDLE_WAIT`] for one and taken
/// itself off the list. A thread that someone took off the list first gets that one's job.
fn next_job(number: u64, jobs: &Receiver<Job>) -> Option<Job> {
    match jobs.recv_timeout(IDLE_WAIT) {
        Ok(job) => return Some(job),
        Err(RecvTimeoutError::Disconnected) => return None,
        Err(RecvTimeoutError::Timeout) => {}
    }
    let mut idle = IDLE.lock().expect("the idle threads");
    match idle.iter().position(|(listed, _)| *listed == number) {
        Some(at) => {
            idle.remove(at);
            None
        }
        // Taken off the list by `run`, whose job is on its way.
        None => {
            drop(idle);
            jobs.recv().ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{run, IDLE, STARTED};
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::channel;
    use std::sync::{Arc, Barrier};

    fn threads_started() -> u64 {
        STARTED.load(Ordering::Relaxed)
    }

    #[test]
    fn jobs_that_wait_on_each_other_each_get_a_thread_and_a_free_thread_is_kept() {
        // Eight jobs that can end only together: each runs, on a thread of its own.
        let (done, heard) = channel();
        let together = Arc::new(Barrier::new(8));
        for job in 0..8u32 {
            let (done, together) = (done.clone(), Arc::clone(&together));
            run(move || {
                together.wait();
                done.send(job).unwrap();
            });
        }
        let mut ran: Vec<u32> = heard.iter().take(8).collect();
        ran.sort_unstable();
        assert_eq!(ran, (0..8).collect::<Vec<_>>());
        // Once a thread is free, the next job goes to it: no thread is started for it.
        while IDLE.lock().unwrap().is_empty() {
            std::thread::yield_now();
        }
        let started = threads_started();
        run(move || done.send(8).unwrap());
        assert_eq!(heard.recv().unwrap(), 8);
        assert_eq!(threads_started(), started);
    }
}
