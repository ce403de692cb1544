use super::replace::{Failure, LastFailure};
use super::*;
use std::time::Duration;

fn spec(scaling: Scaling, offer: Room) -> PoolSpec {
    PoolSpec {
        scaling,
        nodes: 1,
        offer,
        worker_key: "v1".into(),
    }
}

fn fixed(n: u32) -> PoolSpec {
    spec(
        Scaling::Fixed { workers: n },
        Room {
            cpus: 4.0,
            memory_gb: 16.0,
            gpus: 2.0,
        },
    )
}

fn want(job: JobId, room: Option<Room>) -> JobWant {
    JobWant {
        job,
        attempt: 0,
        nodes: 1,
        room,
        placeable: true,
    }
}

fn cpus(n: f64) -> Option<Room> {
    Some(Room {
        cpus: n,
        ..Room::default()
    })
}

fn launched(actions: &[Action]) -> Vec<WorkerId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch { worker } => Some(*worker),
            _ => None,
        })
        .collect()
}

fn retired(actions: &[Action]) -> Vec<WorkerId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Retire { worker } => Some(*worker),
            _ => None,
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn placed(actions: &[Action]) -> Vec<(JobId, WorkerId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Place { job, worker, .. } => Some((*job, *worker)),
            _ => None,
        })
        .collect()
}

fn ready(pool: &mut Pool, workers: &[WorkerId]) -> Vec<Action> {
    workers
        .iter()
        .flat_map(|&w| pool.handle(Event::Worker(w, WorkerEvent::Ready)))
        .collect()
}

#[test]
fn jobs_that_name_no_resources_take_a_whole_worker_in_submission_order() {
    let mut pool = Pool::new(fixed(2));
    assert_eq!(launched(&pool.start()), [1, 2]);
    assert_eq!(pool.status(), PoolStatus::Starting);
    let out = pool.handle(Event::Jobs(vec![
        want(10, None),
        want(11, None),
        want(12, None),
    ]));
    assert!(placed(&out).is_empty(), "no worker is ready: {out:?}");
    let out = ready(&mut pool, &[1, 2]);
    assert_eq!(placed(&out), [(10, 1), (11, 2)]);
    assert!(out.contains(&Action::Status(PoolStatus::Ready)));
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [12]);
    // Job 10 ends: 12 takes its worker.
    let out = pool.handle(Event::Jobs(vec![want(11, None), want(12, None)]));
    assert_eq!(placed(&out), [(12, 1)]);
    assert!(launched(&out).is_empty() && retired(&out).is_empty());
}

#[test]
fn jobs_that_fit_share_a_worker_and_fill_it_before_the_next() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1, 2]);
    let out = pool.handle(Event::Jobs(
        (1..=5).map(|j| want(j, cpus(1.5))).collect::<Vec<_>>(),
    ));
    // 4 cpus per worker: two jobs of 1.5 each, then the next worker.
    assert_eq!(placed(&out), [(1, 1), (2, 1), (3, 2), (4, 2)]);
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [5]);
    // A small job behind a waiting big one is placed (backfill).
    let mut wants: Vec<JobWant> = (1..=5).map(|j| want(j, cpus(1.5))).collect();
    wants.push(want(6, cpus(1.0)));
    assert_eq!(placed(&pool.handle(Event::Jobs(wants))), [(6, 1)]);
}

#[test]
fn gpus_are_counted_one_by_one_and_fractions_share_one() {
    let mut pool = Pool::new(fixed(1));
    pool.start();
    ready(&mut pool, &[1]);
    let gpu = |g: f64| {
        Some(Room {
            gpus: g,
            ..Room::default()
        })
    };
    let out = pool.handle(Event::Jobs(vec![
        want(1, gpu(0.5)),
        want(2, gpu(0.5)),
        want(3, gpu(1.0)),
        want(4, gpu(0.5)),
    ]));
    let gpus: Vec<(JobId, Vec<u32>)> = out
        .iter()
        .filter_map(|a| match a {
            Action::Place { job, placement, .. } => Some((*job, placement.gpus[0].clone())),
            _ => None,
        })
        .collect();
    // Both halves on GPU 0, the whole one on GPU 1; no room for job 4.
    assert_eq!(gpus, [(1, vec![0]), (2, vec![0]), (3, vec![1])]);
    assert_eq!(pool.waiting().collect::<Vec<_>>(), [4]);
}

#[test]
fn a_job_too_big_for_any_worker_waits_without_blocking_others() {
    let mut pool = Pool::new(fixed(1));
    pool.start();
    ready(&mut pool, &[1]);
    let mut two_nodes = want(1, cpus(1.0));
    two_nodes.nodes = 2;
    let out = pool.handle(Event::Jobs(vec![two_nodes, want(2, cpus(1.0))]));
    assert_eq!(placed(&out), [(2, 1)]);
}

/// The pause the actions ask for before a replacement, if any.
fn pause_asked(actions: &[Action]) -> Option<Duration> {
    actions.iter().find_map(|a| match a {
        Action::SetTimer {
            timer: Timer::Replace,
            after,
        } => Some(*after),
        _ => None,
    })
}

/// The pause runs out.
fn resume(pool: &mut Pool) -> Vec<Action> {
    pool.handle(Event::TimerFired(Timer::Replace))
}

#[test]
fn a_failed_setup_is_replaced_after_a_growing_pause_until_three_in_a_row() {
    let mut pool = Pool::new(fixed(1));
    pool.start();
    let out = pool.handle(Event::Worker(1, WorkerEvent::SetupFailed));
    assert_eq!(retired(&out), [1]);
    assert!(launched(&out).is_empty(), "not at once: {out:?}");
    assert_eq!(pause_asked(&out), Some(Duration::from_secs(1)));
    assert_eq!(pool.status(), PoolStatus::Starting);
    pool.handle(Event::Worker(1, WorkerEvent::Gone));
    assert_eq!(launched(&resume(&mut pool)), [2]);
    let out = pool.handle(Event::Worker(2, WorkerEvent::SetupFailed));
    assert!(launched(&out).is_empty(), "{out:?}");
    assert_eq!(pause_asked(&out), Some(Duration::from_secs(2)));
    assert_eq!(launched(&resume(&mut pool)), [3]);
    let out = pool.handle(Event::Worker(3, WorkerEvent::SetupFailed));
    assert!(launched(&out).is_empty(), "{out:?}");
    assert_eq!(pool.status(), PoolStatus::Failed);
    assert!(launched(&resume(&mut pool)).is_empty(), "failed: no more");
    assert_eq!(
        pool.last_failure(),
        Some(LastFailure {
            worker: 3,
            failure: Failure::SetupFailed
        })
    );
    // Applying the pool again tries anew, at once.
    let out = pool.handle(Event::Apply(fixed(1)));
    assert_eq!(launched(&out), [4]);
    assert_eq!(pool.status(), PoolStatus::Starting);
}

#[test]
fn a_ready_worker_resets_the_failure_count() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    pool.handle(Event::Worker(1, WorkerEvent::SetupFailed));
    pool.handle(Event::Worker(2, WorkerEvent::Ready));
    assert_eq!(launched(&resume(&mut pool)), [3]);
    let out = pool.handle(Event::Worker(3, WorkerEvent::SetupFailed));
    assert_eq!(pause_asked(&out), Some(Duration::from_secs(2)));
    assert_eq!(launched(&resume(&mut pool)), [4]);
    let out = pool.handle(Event::Worker(4, WorkerEvent::SetupFailed));
    assert_ne!(pool.status(), PoolStatus::Failed, "{out:?}");
    assert_eq!(
        launched(&resume(&mut pool)),
        [5],
        "one failure, then a success, then two"
    );
}

#[test]
fn workers_that_end_by_themselves_before_ready_are_replaced_with_pauses_then_fail_the_pool() {
    let mut pool = Pool::new(fixed(1));
    assert_eq!(launched(&pool.start()), [1]);
    let mut pauses = Vec::new();
    for w in 1..=3 {
        // Its hold ended (the backend saw it lost), then it is gone.
        pool.handle(Event::Worker(w, WorkerEvent::Lost));
        let out = pool.handle(Event::Worker(w, WorkerEvent::Gone));
        assert!(launched(&out).is_empty(), "never at once: {out:?}");
        if let Some(p) = pause_asked(&out) {
            pauses.push(p.as_secs());
        }
        let out = resume(&mut pool);
        if w < 3 {
            assert_eq!(launched(&out), [w + 1]);
        } else {
            assert!(launched(&out).is_empty(), "{out:?}");
        }
    }
    assert_eq!(pauses, [1, 2, 4]);
    assert_eq!(pool.status(), PoolStatus::Failed);
    assert_eq!(
        pool.last_failure(),
        Some(LastFailure {
            worker: 3,
            failure: Failure::EndedBeforeReady
        })
    );
    let out = pool.handle(Event::Resize(1));
    assert_eq!(launched(&out), [4], "resizing tries anew, at once");
}

#[test]
fn a_worker_that_keeps_ending_after_ready_is_replaced_ever_later_until_it_stays() {
    let mut pool = Pool::new(fixed(1));
    pool.start();
    let mut pauses = Vec::new();
    for w in 1..=10 {
        ready(&mut pool, &[w]);
        pool.handle(Event::Worker(w, WorkerEvent::Lost));
        let out = pool.handle(Event::Worker(w, WorkerEvent::Gone));
        pauses.push(pause_asked(&out).map(|p| p.as_secs()));
        assert_eq!(launched(&resume(&mut pool)), [w + 1]);
    }
    let secs = |v: &[u64]| v.iter().map(|s| Some(*s)).collect::<Vec<_>>();
    assert_eq!(pauses, secs(&[1, 2, 4, 8, 16, 32, 64, 128, 256, 300]));
    assert_ne!(pool.status(), PoolStatus::Failed, "each one was ready");
    // Worker 11 stays ready: once calm, an end is replaced after the
    // first pause again.
    let out = ready(&mut pool, &[11]);
    assert!(
        out.contains(&Action::SetTimer {
            timer: Timer::Calm,
            after: replace::CALM
        }),
        "{out:?}"
    );
    pool.handle(Event::TimerFired(Timer::Calm));
    let out = pool.handle(Event::Worker(11, WorkerEvent::Gone));
    assert_eq!(pause_asked(&out), Some(Duration::from_secs(1)));
}

#[test]
fn retired_workers_and_a_pool_going_down_ask_for_no_pause() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1, 2]);
    let out = pool.handle(Event::Resize(1));
    assert_eq!(retired(&out), [2]);
    let out = pool.handle(Event::Worker(2, WorkerEvent::Gone));
    assert_eq!(pause_asked(&out), None, "retired: asked to end");
    pool.handle(Event::Down);
    let out = pool.handle(Event::Worker(1, WorkerEvent::Gone));
    assert_eq!(pause_asked(&out), None, "down: asked to end");
    assert!(pool.is_finished());
}

#[test]
fn a_pause_survives_a_round_trip_through_the_store() {
    let mut pool = Pool::new(fixed(1));
    pool.start();
    pool.handle(Event::Worker(1, WorkerEvent::SetupFailed));
    let back: Pool =
        serde_json::from_str(&serde_json::to_string(&pool).expect("serialises")).expect("reads");
    assert!(back.replacement_held());
    // An engine stored before pauses existed reads as not held.
    let mut old = serde_json::to_value(Pool::new(fixed(1))).expect("serialises");
    old.as_object_mut()
        .expect("an object")
        .remove("replacement");
    let old: Pool = serde_json::from_value(old).expect("reads");
    assert!(!old.replacement_held());
}

#[test]
fn a_lost_worker_takes_no_job_until_it_is_ready_again() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1, 2]);
    pool.handle(Event::Jobs(vec![want(1, None), want(2, None)]));
    pool.handle(Event::Worker(1, WorkerEvent::Lost));
    // Job 1's engine restarts it: attempt 1 wants a place.
    let mut again = want(1, None);
    again.attempt = 1;
    let out = pool.handle(Event::Jobs(vec![again, want(2, None)]));
    assert!(placed(&out).is_empty(), "{out:?}");
    assert!(
        launched(&out).is_empty(),
        "the worker is made again in place"
    );
    let out = pool.handle(Event::Worker(1, WorkerEvent::Ready));
    assert_eq!(placed(&out), [(1, 1)]);
    assert_eq!(pool.placed(1).map(|p| (p.0, p.1)), Some((1, 1)));
}

#[test]
fn an_attempt_is_placed_once_even_if_its_worker_goes() {
    let mut pool = Pool::new(fixed(1));
    pool.start();
    ready(&mut pool, &[1]);
    pool.handle(Event::Jobs(vec![want(1, None)]));
    pool.handle(Event::Worker(1, WorkerEvent::Gone));
    let out = pool.handle(Event::Jobs(vec![want(1, None)]));
    assert!(placed(&out).is_empty(), "{out:?}");
}

#[test]
fn a_stopping_attempt_keeps_its_place_and_an_unplaced_one_is_not_placed() {
    let mut pool = Pool::new(fixed(1));
    pool.start();
    ready(&mut pool, &[1]);
    pool.handle(Event::Jobs(vec![want(1, None)]));
    let mut stopping = want(1, None);
    stopping.placeable = false;
    let mut cancelled = want(2, None);
    cancelled.placeable = false;
    let out = pool.handle(Event::Jobs(vec![stopping.clone(), cancelled.clone()]));
    assert!(placed(&out).is_empty());
    assert_eq!(pool.placed(1).map(|p| p.1), Some(1));
    assert_eq!(pool.waiting().count(), 0);
}

#[test]
fn a_new_generation_replaces_workers_as_they_become_idle() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1, 2]);
    pool.handle(Event::Jobs(vec![want(1, None)]));
    let mut v2 = fixed(2);
    v2.worker_key = "v2".into();
    let out = pool.handle(Event::Apply(v2));
    assert_eq!(launched(&out), [3, 4]);
    // Worker 2 is idle and goes now; worker 1 runs job 1 and stays.
    assert_eq!(retired(&out), [2]);
    // New jobs wait for the new generation.
    let out = pool.handle(Event::Jobs(vec![want(1, None), want(2, None)]));
    assert!(placed(&out).is_empty());
    let out = ready(&mut pool, &[3]);
    assert_eq!(placed(&out), [(2, 3)]);
    // Job 1 ends: its old worker is retired.
    let out = pool.handle(Event::Jobs(vec![want(2, None)]));
    assert_eq!(retired(&out), [1]);
}

#[test]
fn a_change_of_size_alone_keeps_the_workers() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1, 2]);
    pool.handle(Event::Jobs(vec![want(1, None)]));
    let out = pool.handle(Event::Apply(fixed(3)));
    assert_eq!(launched(&out), [3]);
    assert!(retired(&out).is_empty());
    // Down to one: the idle ones go, the newest first; the busy one stays.
    let out = pool.handle(Event::Resize(1));
    assert_eq!(retired(&out), [2, 3]);
    assert_eq!(pool.workers().len(), 3, "until they are gone");
}

#[test]
fn down_retires_workers_as_their_jobs_end() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1, 2]);
    pool.handle(Event::Jobs(vec![want(1, None)]));
    let out = pool.handle(Event::Down);
    assert_eq!(retired(&out), [2]);
    assert_eq!(pool.status(), PoolStatus::ShuttingDown);
    let out = pool.handle(Event::Jobs(vec![]));
    assert_eq!(retired(&out), [1]);
    pool.handle(Event::Worker(1, WorkerEvent::Gone));
    assert!(!pool.is_finished());
    let out = pool.handle(Event::Worker(2, WorkerEvent::Gone));
    assert!(out.contains(&Action::Status(PoolStatus::Terminated)));
    assert!(pool.is_finished());
}

fn autoscaled(min: u32, max: u32, threshold: u32) -> PoolSpec {
    spec(
        Scaling::Autoscaled {
            min_workers: min,
            max_workers: max,
            queue_length_threshold: threshold,
            upscale_delay: Duration::from_secs(300),
            downscale_delay: Duration::from_secs(1200),
        },
        Room {
            cpus: 2.0,
            ..Room::default()
        },
    )
}

fn upscale() -> Action {
    Action::SetTimer {
        timer: Timer::Upscale,
        after: Duration::from_secs(300),
    }
}

#[test]
fn the_autoscaler_starts_from_zero_at_once_then_adds_one_worker_per_delay() {
    let mut pool = Pool::new(autoscaled(0, 3, 1));
    assert!(launched(&pool.start()).is_empty());
    assert_eq!(pool.status(), PoolStatus::NoWorker);
    let jobs: Vec<JobWant> = (1..=5).map(|j| want(j, None)).collect();
    // From zero: a first worker at once.
    let out = pool.handle(Event::Jobs(jobs.clone()));
    assert_eq!(launched(&out), [1]);
    // 4 wait for a worker (more than the threshold of 1): one more, after
    // the delay, and one at a time.
    let out = ready(&mut pool, &[1]);
    assert_eq!(placed(&out), [(1, 1)]);
    assert!(out.contains(&upscale()), "{out:?}");
    assert!(launched(&out).is_empty(), "not before the delay");
    let out = pool.handle(Event::TimerFired(Timer::Upscale));
    assert_eq!(launched(&out), [2]);
    assert!(
        out.contains(&upscale()),
        "still more than the threshold wait"
    );
    let out = pool.handle(Event::TimerFired(Timer::Upscale));
    assert_eq!(launched(&out), [3]);
    assert!(!out.contains(&upscale()), "capped at max_workers: {out:?}");
    ready(&mut pool, &[2, 3]);
    // Every job ends: after the downscale delay, straight to min_workers.
    let out = pool.handle(Event::Jobs(vec![]));
    assert!(out.contains(&Action::SetTimer {
        timer: Timer::Downscale,
        after: Duration::from_secs(1200)
    }));
    assert!(retired(&out).is_empty());
    let out = pool.handle(Event::TimerFired(Timer::Downscale));
    assert_eq!(retired(&out), [1, 2, 3]);
}

#[test]
fn scaling_down_waits_for_busy_workers_to_be_idle() {
    let mut pool = Pool::new(autoscaled(0, 2, 1));
    pool.start();
    pool.handle(Event::Jobs((1..=3).map(|j| want(j, None)).collect()));
    ready(&mut pool, &[1]);
    pool.handle(Event::TimerFired(Timer::Upscale));
    ready(&mut pool, &[2]);
    // Job 1 still runs on worker 1 when the pool scales to zero.
    pool.handle(Event::Jobs(vec![want(1, None)]));
    let out = pool.handle(Event::Jobs(vec![want(1, None)]));
    assert!(retired(&out).is_empty());
    let placed_on = pool.placed(1).map(|p| p.1).expect("placed");
    let out = pool.handle(Event::TimerFired(Timer::Downscale));
    let idle: Vec<WorkerId> = [1, 2].into_iter().filter(|w| *w != placed_on).collect();
    assert_eq!(retired(&out), idle, "only the idle one goes now");
    let out = pool.handle(Event::Jobs(vec![]));
    assert_eq!(retired(&out), [placed_on], "the busy one once idle");
}

#[test]
fn a_wish_that_goes_away_before_its_delay_is_forgotten() {
    let mut pool = Pool::new(autoscaled(1, 3, 1));
    pool.start();
    ready(&mut pool, &[1]);
    // Two wait (more than 1): a wish for one more worker.
    let out = pool.handle(Event::Jobs(vec![
        want(1, None),
        want(2, None),
        want(3, None),
    ]));
    assert!(out.contains(&upscale()), "{out:?}");
    // Job 3 ends before the delay: one waits, as many as the threshold.
    pool.handle(Event::Jobs(vec![want(1, None), want(2, None)]));
    let out = pool.handle(Event::TimerFired(Timer::Upscale));
    assert!(launched(&out).is_empty(), "{out:?}");
    // Never below min_workers.
    pool.handle(Event::Jobs(vec![]));
    let out = pool.handle(Event::TimerFired(Timer::Downscale));
    assert!(retired(&out).is_empty(), "{out:?}");
}

#[test]
fn the_engine_survives_a_round_trip_through_the_store() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1]);
    pool.handle(Event::Jobs(vec![want(1, cpus(1.0))]));
    let json = serde_json::to_string(&pool).expect("serialises");
    let back: Pool = serde_json::from_str(&json).expect("reads back");
    assert_eq!(back, pool);
}

#[test]
fn failures_are_forgotten_when_the_pool_is_applied_again_even_with_a_ready_worker() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1]);
    for w in [2, 3] {
        pool.handle(Event::Worker(w, WorkerEvent::SetupFailed));
        assert_eq!(launched(&resume(&mut pool)), [w + 1]);
    }
    let out = pool.handle(Event::Worker(4, WorkerEvent::SetupFailed));
    assert!(launched(&out).is_empty(), "three in a row: {out:?}");
    assert!(launched(&resume(&mut pool)).is_empty(), "three in a row");
    assert_eq!(pool.status(), PoolStatus::Ready, "one worker still serves");
    let out = pool.handle(Event::Resize(2));
    assert_eq!(launched(&out), [5]);
}

#[test]
fn a_worker_whose_jobs_all_left_is_whole_again_whatever_fractions_did() {
    let mut pool = Pool::new(spec(
        Scaling::Fixed { workers: 1 },
        Room {
            cpus: 7.5,
            ..Room::default()
        },
    ));
    pool.start();
    ready(&mut pool, &[1]);
    let sizes = [0.2, 0.7, 0.33, 0.7, 1.1];
    let wants: Vec<JobWant> = (1..=5)
        .map(|j| want(j, cpus(sizes[j as usize - 1])))
        .collect();
    assert_eq!(placed(&pool.handle(Event::Jobs(wants.clone()))).len(), 5);
    // They end in another order than they came.
    for keep in [vec![1, 2, 4], vec![2], vec![]] {
        let left: Vec<JobWant> = wants
            .iter()
            .filter(|w| keep.contains(&w.job))
            .cloned()
            .collect();
        pool.handle(Event::Jobs(left));
    }
    let out = pool.handle(Event::Jobs(vec![want(9, None)]));
    assert_eq!(placed(&out), [(9, 1)], "a whole-worker job fits");
}

#[test]
fn a_waiting_job_takes_a_worker_before_it_is_found_idle() {
    let mut pool = Pool::new(autoscaled(0, 2, 1));
    pool.start();
    pool.handle(Event::Jobs(vec![want(1, None)]));
    ready(&mut pool, &[1]);
    // Nothing waits: the pool is to scale to zero once worker 1 is idle.
    pool.handle(Event::TimerFired(Timer::Downscale));
    // Job 1 ends as job 2 arrives: job 2 runs on the warm worker.
    let out = pool.handle(Event::Jobs(vec![want(2, None)]));
    assert_eq!(placed(&out), [(2, 1)], "{out:?}");
    assert!(retired(&out).is_empty(), "{out:?}");
}

#[test]
fn calm_needs_the_worker_that_became_ready_to_stay_so_not_a_sibling() {
    let mut pool = Pool::new(fixed(2));
    pool.start();
    ready(&mut pool, &[1]);
    // Worker 2 ends by itself twice, after being ready.
    ready(&mut pool, &[2]);
    pool.handle(Event::Worker(2, WorkerEvent::Lost));
    pool.handle(Event::Worker(2, WorkerEvent::Gone));
    assert_eq!(launched(&resume(&mut pool)), [3]);
    // Worker 3 becomes ready, arming the calm timer, and is lost before it
    // fires; worker 1 is ready all along.
    ready(&mut pool, &[3]);
    pool.handle(Event::Worker(3, WorkerEvent::Lost));
    pool.handle(Event::TimerFired(Timer::Calm));
    let out = pool.handle(Event::Worker(3, WorkerEvent::Gone));
    assert_eq!(
        pause_asked(&out),
        Some(Duration::from_secs(2)),
        "not calm: the second end in a row"
    );
}
