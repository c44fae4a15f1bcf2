//! The apps table across reloads and app changes, as `Shared` makes it:
//! keys, fingerprints, slots kept across reloads, rules shared.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use sluicegate_config::App;

use crate::apps::table::{split_index, SHARDS};
use crate::apps::{AppChange, AppTable, DeltaError};
use crate::snapshot::Shared;

fn config(services: &[&str], apps: &str, log: &str) -> sluicegate_config::Config {
    let mut text = format!("listen: [\"127.0.0.1:9\"]\nlog: {{ access: {log} }}\nservices:\n");
    for s in services {
        text.push_str(&format!(
            "  - {{ name: {s}, endpoints: [\"127.0.0.1:9\"] }}\n"
        ));
    }
    text.push_str("plans:\n  gold: { rate: 1/s, burst: 1 }\n  silver: { rate: 1/s, burst: 1 }\n");
    text.push_str("apps:\n");
    text.push_str(apps);
    sluicegate_config::parse(&text).unwrap()
}

const A: &str = "  - { id: a, keys: [key-of-a-0001], plan: gold }\n";
const B: &str = "  - { id: b, keys: [key-of-b-0001, key-of-b-0002], plan: gold, plans_by_service: { s2: silver } }\n";
const C: &str = "  - { id: c, keys: [key-of-c-0001], plan: gold }\n";

/// Charges one request to `app`'s plan for `service` (by name).
fn charge(t: &Arc<AppTable>, app: &str, service: u32) -> bool {
    let a = t.by_id(app).unwrap();
    let c = a.charge_for(service).unwrap();
    t.slot(c.slot)
        .limit
        .try_admit(c.plan, Instant::now(), SystemTime::now)
        .is_ok()
}

#[test]
fn keys_find_their_app_and_nothing_else() {
    let shared = Shared::new(&config(&["s1", "s2"], &format!("{A}{B}"), "off")).unwrap();
    let t = shared.snapshot.load().apps.clone();
    assert_eq!(t.by_key(b"key-of-a-0001").unwrap().id(), "a");
    assert_eq!(t.by_key(b"key-of-b-0001").unwrap().id(), "b");
    assert_eq!(t.by_key(b"key-of-b-0002").unwrap().id(), "b");
    for wrong in [
        &b"key-of-a-000"[..],
        b"key-of-a-00011",
        b"KEY-OF-A-0001",
        b"",
        b"a",
    ] {
        assert!(t.by_key(wrong).is_none(), "{wrong:?}");
    }
    assert!(t.by_id("z").is_none());
}

#[test]
fn slots_follow_apps_across_reloads_and_are_reused_only_when_unreachable() {
    let shared = Shared::new(&config(&["s1", "s2"], &format!("{A}{B}"), "off")).unwrap();
    let first = shared.snapshot.load_full();
    let t1 = first.apps.clone();
    // Use up each bucket (burst 1): a, b on s1 (default), b on s2.
    assert!(charge(&t1, "a", 0) && charge(&t1, "b", 0) && charge(&t1, "b", 1));
    assert!(!charge(&t1, "a", 0));
    t1.by_id("a")
        .unwrap()
        .slot()
        .requests
        .store(7, Ordering::Relaxed);

    // s2 now comes first (index 0), a is gone, c is new.
    shared
        .reload(&config(&["s2", "s1"], &format!("{B}{C}"), "off"))
        .unwrap();
    let t2 = shared.snapshot.load().apps.clone();
    assert!(!charge(&t2, "b", 1), "b's default bucket kept");
    assert!(!charge(&t2, "b", 0), "b's s2 bucket kept, found by name");
    assert!(charge(&t2, "c", 0));
    assert!(t2.by_id("a").is_none());
    let a_slot = t1.rec(t1.find_id("a").unwrap()).slot;
    assert_ne!(t2.rec(t2.find_id("c").unwrap()).slot, a_slot);
    assert_eq!(shared.registry.lock().unwrap().live_slots(), 4);

    // While the first table lives (a request in flight holds it), a's
    // slot stays a's; once it is gone, a slot is reused at rest.
    shared
        .reload(&config(&["s2", "s1"], &format!("{B}{C}{A}"), "off"))
        .unwrap();
    let t3 = shared.snapshot.load().apps.clone();
    assert_ne!(t3.rec(t3.find_id("a").unwrap()).slot, a_slot);
    drop((first, t1, t2, t3));
    shared
        .reload(&config(&["s2", "s1"], &format!("{B}{C}"), "off"))
        .unwrap();
    shared
        .reload(&config(&["s2", "s1"], &format!("{B}{C}{A}"), "off"))
        .unwrap();
    let t5 = shared.snapshot.load().apps.clone();
    let a = t5.by_id("a").unwrap();
    assert_eq!(a.slot().requests.load(Ordering::Relaxed), 0);
    assert!(charge(&t5, "a", 1), "a starts with a full bucket");
    assert!(shared.registry.lock().unwrap().live_slots() <= 6);
}

#[test]
fn a_failed_reload_gives_its_new_slots_back() {
    let shared = Shared::new(&config(&["s1", "s2"], A, "off")).unwrap();
    let before = shared.registry.lock().unwrap().live_slots();
    let bad = config(
        &["s1", "s2"],
        &format!("{A}{B}{C}"),
        "/nonexistent-dir/x/access.log",
    );
    assert!(shared.reload(&bad).is_err());
    assert_eq!(shared.registry.lock().unwrap().live_slots(), before);
    assert!(shared.snapshot.load().apps.by_id("a").is_some());
}

/// An app as a config's `apps` item decodes it.
fn app(yaml_item: &str) -> App {
    config(&["s1", "s2"], yaml_item, "off").apps.remove(0)
}

fn many(n: usize) -> String {
    (0..n)
        .map(|i| format!("  - {{ id: app{i}, keys: [key-{i:08}], plan: gold }}\n"))
        .collect()
}

#[test]
fn a_change_of_one_app_copies_only_the_shards_it_touches() {
    let shared = Shared::new(&config(&["s1", "s2"], &many(3000), "off")).unwrap();
    let before = shared.snapshot.load_full();
    let t1 = before.apps.clone();
    assert!(charge(&t1, "app7", 0));
    assert!(!charge(&t1, "app7", 0), "app7's bucket is spent");
    let new7 = app("  - { id: app7, keys: [new-key-of-app7], plan: gold }\n");
    let added = app("  - { id: fresh, keys: [key-of-fresh-1], plan: silver }\n");
    let generation = shared
        .apply_apps(&[
            AppChange::Upsert(&new7),
            AppChange::Upsert(&added),
            AppChange::Remove("app9"),
        ])
        .unwrap();
    let after = shared.snapshot.load_full();
    assert_eq!(after.generation, generation);
    assert_eq!(generation, before.generation + 1);
    let t2 = after.apps.clone();
    // The routes and router are the same; most shards too.
    assert!(Arc::ptr_eq(&before.routes, &after.routes));
    assert!(Arc::ptr_eq(&before.router, &after.router));
    assert!(same(&t1.app_shards, &t2.app_shards) >= SHARDS - 3);
    assert!(same(&t1.key_shards, &t2.key_shards) >= SHARDS - 4);
    // The old key is gone, the new one finds the app, which kept its slot.
    assert!(t2.by_key(b"key-00000007").is_none());
    assert_eq!(t2.by_key(b"new-key-of-app7").unwrap().id(), "app7");
    assert!(!charge(&t2, "app7", 0), "app7 kept its spent bucket");
    assert_eq!(t2.by_key(b"key-of-fresh-1").unwrap().id(), "fresh");
    assert!(t2.by_id("app9").is_none() && t2.by_key(b"key-00000009").is_none());
    assert_eq!(t2.len(), 3000);
    // Every other app is where it was.
    for i in (0..3000).filter(|i| ![7, 9].contains(i)) {
        let a = t2.by_key(format!("key-{i:08}").as_bytes()).unwrap();
        assert_eq!(a.id(), format!("app{i}"));
        assert_eq!(
            a.slot() as *const _,
            t1.by_id(&format!("app{i}")).unwrap().slot() as *const _
        );
    }
    // The old table still answers for requests that hold it.
    assert_eq!(t1.by_key(b"key-00000007").unwrap().id(), "app7");
    assert_eq!(t2.iter().count(), 3000);
    // A whole reload afterwards starts from the changed table.
    shared
        .reload(&config(&["s1", "s2"], &many(10), "off"))
        .unwrap();
    let t3 = shared.snapshot.load().apps.clone();
    assert_eq!(t3.len(), 10);
    assert!(
        !charge(&t3, "app7", 0),
        "app7's bucket kept across the reload"
    );
}

#[test]
fn a_change_is_checked_as_a_config_would_be() {
    let shared = Shared::new(&config(&["s1", "s2"], &many(50), "off")).unwrap();
    let live = shared.registry.lock().unwrap().live_slots();
    let taken = app("  - { id: thief, keys: [key-00000003], plan: gold }\n");
    let err = shared.apply_apps(&[AppChange::Upsert(&taken)]).unwrap_err();
    assert_eq!(
        err,
        DeltaError::Invalid(vec![(
            "thief".into(),
            "keys[0]".into(),
            "key already given to another app".into()
        )])
    );
    assert_eq!(
        shared.registry.lock().unwrap().live_slots(),
        live,
        "slots given back"
    );
    assert!(shared.snapshot.load().apps.by_id("thief").is_none());
    // Two apps of one change may not share a key either.
    let a = app("  - { id: x1, keys: [shared-key-0001] }\n");
    let b = app("  - { id: x2, keys: [shared-key-0001] }\n");
    assert!(matches!(
        shared.apply_apps(&[AppChange::Upsert(&a), AppChange::Upsert(&b)]),
        Err(DeltaError::Invalid(_))
    ));
    // A key given up by one app in the change may go to another.
    let moved = app("  - { id: app4, keys: [other-key-0004] }\n");
    let gets = app("  - { id: heir, keys: [key-00000004] }\n");
    shared
        .apply_apps(&[AppChange::Upsert(&moved), AppChange::Upsert(&gets)])
        .unwrap();
    let t = shared.snapshot.load().apps.clone();
    assert_eq!(t.by_key(b"key-00000004").unwrap().id(), "heir");
    assert_eq!(t.by_key(b"other-key-0004").unwrap().id(), "app4");
    // Removing an app frees its slot once no table names it.
    let before = shared.registry.lock().unwrap().live_slots();
    drop(t);
    shared.apply_apps(&[AppChange::Remove("heir")]).unwrap();
    shared.apply_apps(&[AppChange::Remove("app5")]).unwrap();
    assert!(shared.registry.lock().unwrap().live_slots() < before);
    let t = shared.snapshot.load().apps.clone();
    assert!(split_index(t.find_id("app6").unwrap()).0 < SHARDS);
    assert_eq!(t.len(), 49);
}

fn same<T>(a: &[Arc<T>], b: &[Arc<T>]) -> usize {
    a.iter().zip(b).filter(|(x, y)| Arc::ptr_eq(x, y)).count()
}
