//! Workqueue scenarios, spec section 4 group K (64–74), on tokio's paused clock.

use std::time::Duration;

use super::*;

fn exp(base_ms: u64, max_ms: u64) -> ItemExponentialFailureRateLimiter<&'static str> {
    ItemExponentialFailureRateLimiter::new(
        Duration::from_millis(base_ms),
        Duration::from_millis(max_ms),
    )
}

fn new_q() -> RateLimitingQueue<&'static str> {
    RateLimitingQueue::with_default_limiter()
}

#[tokio::test(start_paused = true)]
async fn scenario_64_dedup() {
    let q = new_q();
    q.add("foo");
    q.add("bar");
    q.add("foo");
    assert_eq!(q.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn scenario_65_readd_while_processing() {
    let q = new_q();
    q.add("foo");
    assert_eq!(q.get().await, Some("foo"));
    q.add("foo");
    assert_eq!(q.len(), 0);
    q.done(&"foo");
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("foo"));
    q.done(&"foo");
    assert_eq!(q.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_66_no_concurrent_processing_of_one_item() {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    let q: RateLimitingQueue<u32> = RateLimitingQueue::with_default_limiter();
    let in_flight = Arc::new(Mutex::new(HashSet::new()));
    let readded = Arc::new(Mutex::new(HashSet::new()));
    let mut producers = Vec::new();
    for p in 0..50u32 {
        let q = q.clone();
        producers.push(tokio::spawn(async move {
            for i in 0..50 {
                q.add(p * 1000 + i % 7);
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut workers = Vec::new();
    for _ in 0..10 {
        let (q, f, r) = (q.clone(), in_flight.clone(), readded.clone());
        workers.push(tokio::spawn(async move {
            while let Some(item) = q.get().await {
                assert!(
                    f.lock().unwrap().insert(item),
                    "{item} processed twice at once"
                );
                tokio::task::yield_now().await;
                if r.lock().unwrap().insert(item) {
                    q.add(item);
                }
                f.lock().unwrap().remove(&item);
                q.done(&item);
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    q.shut_down_with_drain().await;
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn scenario_67_shutdown_drains_then_ends() {
    let q = new_q();
    q.add("a");
    q.add("b");
    q.shut_down();
    q.add("added after shutdown!");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn scenario_68_shutdown_with_drain() {
    let q = new_q();
    q.add("a");
    q.add("b");
    let a = q.get().await.unwrap();
    let b = q.get().await.unwrap();
    q.add(a); // dirty while processing
    let q2 = q.clone();
    let drain = tokio::spawn(async move { q2.shut_down_with_drain().await });
    tokio::task::yield_now().await;
    assert!(!drain.is_finished());
    q.done(&a);
    // The dirty item is handed out again during the drain.
    assert_eq!(q.get().await, Some("a"));
    q.done(&"a");
    tokio::task::yield_now().await;
    assert!(!drain.is_finished(), "b is still processing");
    q.done(&b);
    drain.await.unwrap();
    assert_eq!(q.get().await, None);

    // A later shut_down forces a pending drain to return.
    let q = new_q();
    q.add("x");
    let _x = q.get().await.unwrap();
    let q2 = q.clone();
    let drain = tokio::spawn(async move { q2.shut_down_with_drain().await });
    tokio::task::yield_now().await;
    assert!(!drain.is_finished());
    q.shut_down();
    drain.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn scenario_69_delayed_dedup_keeps_earliest() {
    let q = new_q();
    q.add_after("foo", Duration::from_millis(50));
    q.add_after("foo", Duration::from_millis(70));
    assert_eq!(q.waiting_len(), 1);
    tokio::time::advance(Duration::from_millis(50)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("foo"));
    q.done(&"foo");
    tokio::time::advance(Duration::from_millis(30)).await;
    assert_eq!(q.len(), 0, "nothing fires at 70 ms");

    let q = super::RateLimitingQueue::<&str>::with_default_limiter();
    q.add_after("foo", Duration::from_millis(50));
    q.add_after("foo", Duration::from_millis(30));
    tokio::time::advance(Duration::from_millis(30)).await;
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn scenario_70_delayed_ordering() {
    let q = new_q();
    q.add_after("1000", Duration::from_millis(1000));
    q.add_after("500", Duration::from_millis(500));
    q.add_after("250", Duration::from_millis(250));
    tokio::time::advance(Duration::from_secs(2)).await;
    let mut out = Vec::new();
    for _ in 0..3 {
        out.push(q.get().await.unwrap());
    }
    assert_eq!(out, vec!["250", "500", "1000"]);
    // A waiting get wakes exactly at the ready time.
    let q = super::RateLimitingQueue::<&str>::with_default_limiter();
    let t = tokio::time::Instant::now();
    q.add_after("x", Duration::from_millis(300));
    assert_eq!(q.get().await, Some("x"));
    assert_eq!(t.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn scenario_71_exponential_limiter() {
    let l = exp(1, 1000);
    let ms = |d: Duration| d.as_millis() as u64;
    let got: Vec<u64> = (0..5).map(|_| ms(l.when(&"one"))).collect();
    assert_eq!(got, vec![1, 2, 4, 8, 16]);
    assert_eq!(l.num_requeues(&"one"), 5);
    assert_eq!(ms(l.when(&"two")), 1);
    assert_eq!(ms(l.when(&"two")), 2);
    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(ms(l.when(&"one")), 1);
    let l = exp(1, 1000);
    for _ in 0..1000 {
        l.when(&"over");
    }
    assert_eq!(l.when(&"over"), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn scenario_72_max_of() {
    let l: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
        Box::new(ItemFastSlowRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(3),
            3,
        )),
        Box::new(exp(1, 1000)),
    ]);
    let got: Vec<Duration> = (0..5).map(|_| l.when(&"one")).collect();
    let ms = Duration::from_millis;
    assert_eq!(got, vec![ms(5), ms(5), ms(5), ms(3000), ms(3000)]);
    assert_eq!(l.num_requeues(&"one"), 5);
    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
}

#[tokio::test(start_paused = true)]
async fn scenario_73_rate_limited_queue() {
    let q = RateLimitingQueue::new(exp(1, 1000));
    q.add_rate_limited("one");
    assert_eq!((q.len(), q.waiting_len()), (0, 1));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(q.len(), 1);
    let one = q.get().await.unwrap();
    q.add_rate_limited(one);
    assert_eq!(q.num_requeues(&"one"), 2);
    q.done(&one);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(q.len(), 0, "second retry waits 2 ms");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(q.len(), 1);
    let one = q.get().await.unwrap();
    q.done(&one);
    q.forget(&one);
    q.add_rate_limited(one);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(q.len(), 1, "after forget: 1 ms again");
}

#[tokio::test(start_paused = true)]
async fn scenario_74_default_controller_limiter() {
    let l = default_controller_rate_limiter::<String>();
    // Per item: 5 ms · 2^n, capped at 1000 s from the 19th failure (bucket has burst to spare).
    let mut seen = Vec::new();
    for _ in 0..20 {
        seen.push(l.when(&"item".to_string()));
    }
    assert_eq!(seen[0], Duration::from_millis(5));
    assert_eq!(seen[17], Duration::from_millis(5 << 17));
    assert_eq!(seen[18], Duration::from_secs(1000));
    assert_eq!(seen[19], Duration::from_secs(1000));
    // Bucket: 100 tokens in total were available; 20 are used, 80 immediate calls remain,
    // then calls are spaced 100 ms apart.
    for i in 0..80 {
        assert_eq!(l.when(&format!("x{i}")), Duration::from_millis(5));
    }
    assert_eq!(l.when(&"y1".to_string()), Duration::from_millis(100));
    assert_eq!(l.when(&"y2".to_string()), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn bucket_try_acquire_drops_instead_of_borrowing() {
    let l = BucketRateLimiter::new(10.0, 3);
    assert!(
        (0..3).all(|_| l.try_acquire()),
        "the burst is available at once"
    );
    assert!(
        !l.try_acquire(),
        "empty: refused, not borrowed from the future"
    );
    assert!(
        !l.try_acquire(),
        "a refusal takes nothing, so it cannot dig a debt"
    );
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(l.try_acquire(), "one token per 1/qps");
    assert!(!l.try_acquire());
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(
        (0..10).filter(|_| l.try_acquire()).count(),
        3,
        "refill stops at burst"
    );
    // Shares the refill with `when`: a reservation made now is paid by the next refill.
    assert_eq!(RateLimiter::<()>::when(&l, &()), Duration::from_millis(100));
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(!l.try_acquire(), "the token earned went to the reservation");
}
