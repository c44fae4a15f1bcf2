//! The apps table's parts: the key table, slot chunks, rules shared by
//! apps. How tables follow reloads and app changes is tested with the
//! snapshot that makes them (`crate::snapshot::shared`'s `apps` tests).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::keys::{KeyRec, KeyTable};
use super::slot::{chunk_of, CHUNK};
use super::table::SHARDS;
use super::*;

#[test]
fn key_table_finds_every_record_past_full_buckets() {
    let mut t = KeyTable::with_capacity(60);
    assert_eq!(t.buckets.len(), 32);
    // 60 records, all hashed to bucket 5: they spill over 15 buckets.
    // Tags repeat every 7 records, so candidates share tags.
    let hash = |i: u64| ((i % 7 + 1) << 48) | 5;
    for i in 0..60u32 {
        let rec = KeyRec {
            app: i,
            ..KeyRec::default()
        };
        t.insert(hash(u64::from(i)), rec);
    }
    for i in 0..60u64 {
        let found: Vec<u32> = t.candidates(hash(i)).map(|r| r.app).collect();
        let want: Vec<u32> = (0..60u32).filter(|j| u64::from(*j) % 7 == i % 7).collect();
        assert_eq!(found, want);
    }
    // A hash whose bucket has room: that bucket only.
    assert_eq!(t.candidates((1 << 48) | 30).count(), 0);
    // The tag is never 0, the empty mark.
    assert_eq!(KeyTable::tag(0), 1);
    assert_eq!(KeyTable::with_capacity(0).candidates(0).count(), 0);
    assert_eq!(KeyTable::with_capacity(1_000_000).buckets.len(), 1 << 19);
}

#[test]
fn slot_chunks_double_and_every_slot_is_distinct() {
    assert_eq!(chunk_of(0), (0, 0));
    assert_eq!(chunk_of(CHUNK as u32 - 1), (0, CHUNK - 1));
    assert_eq!(chunk_of(CHUNK as u32), (1, 0));
    assert_eq!(chunk_of(3 * CHUNK as u32 - 1), (1, 2 * CHUNK - 1));
    assert_eq!(chunk_of(3 * CHUNK as u32), (2, 0));
    let mut pool = SlotPool::default();
    let n = 8 * CHUNK as u32;
    for s in 0..n {
        assert_eq!(pool.take(), s);
        pool.get(s).requests.store(u64::from(s), Ordering::Relaxed);
    }
    assert_eq!(pool.chunks.len(), 4); // 1 + 2 + 4 + 8 chunks' worth
    assert!((0..n).all(|s| pool.get(s).requests.load(Ordering::Relaxed) == u64::from(s)));
}

#[test]
fn apps_with_the_same_rules_share_one_policy() {
    let mut text = String::from(
        "listen: [\"127.0.0.1:9\"]\nservices:\n  - { name: s1, endpoints: [\"127.0.0.1:9\"] }\n\
         plans:\n  gold: { rate: 1/s, burst: 1 }\napps:\n",
    );
    for i in 0..1000 {
        text.push_str(&format!(
            "  - {{ id: app{i}, keys: [key-{i:08}], plan: gold }}\n"
        ));
    }
    let config = sluicegate_config::parse(&text).unwrap();
    let secret = std::collections::hash_map::RandomState::new();
    let t = AppTable::new(&config, &["s1"], None, &mut SlotPool::default(), &secret, 1).unwrap();
    let t = Arc::new(t);
    assert_eq!(t.len(), 1000);
    // One policy in each shard that has apps (they are spread by id).
    assert!(t.app_shards.iter().all(|s| s.policies.len() <= 1));
    let shards = t.app_shards.iter().filter(|s| !s.apps.is_empty()).count();
    assert!(shards > SHARDS / 2, "{shards} shards hold apps");
    assert_eq!(t.by_key(b"key-00000999").unwrap().id(), "app999");
}
