//! Several processes of one deployment on one PostgreSQL database (issue 15).

use crate::helpers::{TestApp, another_process, spawn_app_with};

fn postgres() -> bool {
    let on = std::env::var("PIGEONHOLE_TEST_POSTGRES_URL").is_ok_and(|u| !u.is_empty());
    if !on {
        eprintln!("skipping: needs PostgreSQL (PIGEONHOLE_TEST_POSTGRES_URL)");
    }
    on
}

/// Calls `GET /me` `calls` times with `key`, alternating between the
/// processes; returns how many were allowed, or `None` if a minute boundary
/// fell among them (the windows reset).
async fn spread_calls(processes: &[&TestApp], key: &str, calls: usize) -> Option<usize> {
    let mut allowed = 0;
    let mut resets = std::collections::HashSet::new();
    for i in 0..calls {
        let r = processes[i % processes.len()]
            .call("GET", "/api/v1/me", Some(key), None)
            .await;
        assert!(r.status == 200 || r.status == 429, "{}", r.text);
        resets.insert(r.header("x-ratelimit-reset").map(str::to_string));
        if r.status == 200 {
            allowed += 1;
        }
    }
    (resets.len() == 1).then_some(allowed)
}

#[tokio::test]
async fn a_keys_rate_limit_holds_across_processes() {
    if !postgres() {
        return;
    }
    let a = spawn_app_with(|_| {}).await;
    let b = another_process(&a, |_| {}).await;
    let c = another_process(&a, |_| {}).await;
    for attempt in 0..3 {
        let key = a.new_key(None, None, None, Some(200)).await;
        let Some(allowed) = spread_calls(&[&a, &b, &c], &key.key, 300).await else {
            assert!(attempt < 2, "three minute boundaries in a row");
            continue;
        };
        // Leases of 1 % (2 calls): at most one unspent lease per process.
        assert!(
            (194..=200).contains(&allowed),
            "allowed {allowed} of a limit of 200"
        );
        return;
    }
}

#[tokio::test]
async fn per_process_counting_stays_available_as_the_spec_describes_it() {
    if !postgres() {
        return;
    }
    let per_process = |m: &mut std::collections::HashMap<String, String>| {
        m.insert("PIGEONHOLE_RATE_LIMIT_SCOPE".into(), "process".into());
    };
    let a = spawn_app_with(per_process).await;
    let b = another_process(&a, per_process).await;
    for attempt in 0..3 {
        let key = a.new_key(None, None, None, Some(20)).await;
        let Some(allowed) = spread_calls(&[&a, &b], &key.key, 60).await else {
            assert!(attempt < 2, "three minute boundaries in a row");
            continue;
        };
        assert_eq!(allowed, 40, "each process counts 20");
        return;
    }
}
