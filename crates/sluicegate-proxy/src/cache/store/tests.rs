//! The store: keys and their `Vary` variants, the memory bound under
//! any mix of inserts, CLOCK's second chance, removal and purges.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;

fn parts(body: usize) -> Parts {
    Parts {
        status: 200,
        fields: b"content-type: text/plain\r\n"[..].into(),
        body: Bytes::from(vec![b'x'; body]),
        stored: Instant::now(),
        initial_age: Duration::ZERO,
        fresh_for: Duration::from_secs(60),
        stale_while_revalidate: Duration::ZERO,
        stale_if_error: Duration::ZERO,
        must_revalidate: false,
        no_cache: false,
        etag: None,
        last_modified: None,
        vary: Box::new([]),
        tags: Box::new([]),
        route: Arc::from("r"),
    }
}

fn no_fields(_: &[u8]) -> Option<&'static [u8]> {
    None
}

/// A hash that lands in shard 0, distinct per `n` (below 2^32).
fn in_shard_0(n: u64) -> u64 {
    n
}

#[test]
fn a_key_is_its_parts_not_just_its_hash() {
    let s = Store::new(64 << 20, 1 << 20);
    let key: &[&[u8]] = &[b"example.com", b"/a", b""];
    let h = s.hash(key);
    assert_ne!(h, s.hash(&[b"example.com", b"/a", b"x"]));
    // The parts' boundaries count: "ab" + "" is not "a" + "b".
    assert_ne!(s.hash(&[b"ab", b""]), s.hash(&[b"a", b"b"]));
    assert!(s.get(h, key, &no_fields).is_none());
    s.insert(h, key, parts(100)).unwrap();
    let o = s.get(h, key, &no_fields).unwrap();
    assert_eq!(o.body.len(), 100);
    // The same hash with other parts (a collision) is no hit.
    assert!(s
        .get(h, &[b"example.com", b"/b", b""], &no_fields)
        .is_none());
    let mut keys = Vec::new();
    s.each(&mut |k, _, _| keys.push(k.to_vec()));
    assert_eq!(keys.len(), 1);
    let back: Vec<&[u8]> = key_parts(&keys[0]).collect();
    assert_eq!(back, key);
    assert_eq!(s.remove(h, key), 1);
    assert!(s.get(h, key, &no_fields).is_none());
    assert_eq!(s.usage(), (0, 0));
}

#[test]
fn vary_keeps_one_object_per_set_of_values() {
    let s = Store::new(64 << 20, 1 << 20);
    let key: &[&[u8]] = &[b"/v"];
    let h = s.hash(key);
    let with = |lang: &'static [u8]| {
        let mut p = parts(10);
        p.vary = Box::new([(b"accept-language"[..].into(), lang.into())]);
        p
    };
    s.insert(h, key, with(b"en")).unwrap();
    s.insert(h, key, with(b"fr")).unwrap();
    s.insert(h, key, with(b"fr")).unwrap(); // replaces its twin
    assert_eq!(s.usage().1, 2);
    fn en(name: &[u8]) -> Option<&'static [u8]> {
        (name == b"accept-language").then_some(b" en")
    }
    fn de(name: &[u8]) -> Option<&'static [u8]> {
        (name == b"accept-language").then_some(b"de")
    }
    assert!(s.get(h, key, &en).is_some());
    assert!(s.get(h, key, &de).is_none());
    assert!(s.get(h, key, &no_fields).is_none());
    assert_eq!(s.remove(h, key), 2);
}

#[test]
fn the_memory_bound_holds_whatever_is_inserted() {
    let memory = 4 << 20;
    let s = Store::new(memory, 1 << 20);
    let mut rng = fastrand::Rng::with_seed(7);
    let mut inserted = 0u64;
    for i in 0..20_000u32 {
        let path = format!("/o/{}", rng.u32(..5_000));
        let key: &[&[u8]] = &[b"h", path.as_bytes()];
        let h = s.hash(key);
        // Reads now and then, so that CLOCK has marks to clear.
        if i % 3 == 0 {
            let _ = s.get(h, key, &no_fields);
        }
        let body = rng.usize(0..8_000);
        let mut p = parts(body);
        p.tags = vec![format!("t{}", i % 7).into_bytes().into_boxed_slice()].into();
        if s.insert(h, key, p).is_some() {
            inserted += 1;
        }
        let (bytes, _) = s.usage();
        assert!(bytes <= memory, "{bytes} > {memory} after {i}");
    }
    assert!(inserted > 19_000);
    assert!(s.stats.evictions.load(Ordering::Relaxed) > 0);
    // Every object's counted size is at least its body, key and head,
    // plus the index's overhead.
    let mut total = 0;
    s.each(&mut |k, o, size| {
        assert!(size as usize >= o.body.len() + k.len() + o.fields.len() + OVERHEAD);
        total += size;
    });
    assert_eq!(total, s.usage().0);
}

#[test]
fn clock_keeps_what_was_read_and_evicts_what_was_not() {
    // One shard's share: 64 objects of about 10 KiB.
    let memory = 64 * 64 * 11_000;
    let s = Store::new(memory, memory / 256);
    assert_eq!(s.shards(), 64);
    let key = |n: u64| n.to_le_bytes();
    let mut hot = Vec::new();
    for n in 0..64u64 {
        let k = key(n);
        s.insert(in_shard_0(n), &[&k], parts(10_000)).unwrap();
        if n % 2 == 0 {
            hot.push(n);
        }
    }
    for &n in &hot {
        let k = key(n);
        assert!(s.get(in_shard_0(n), &[&k], &no_fields).is_some());
    }
    // Newcomers push the unread ones out first.
    for n in 100..120u64 {
        let k = key(n);
        s.insert(in_shard_0(n), &[&k], parts(10_000)).unwrap();
    }
    let kept = |n: u64| {
        let k = key(n);
        s.get(in_shard_0(n), &[&k], &no_fields).is_some()
    };
    assert!(hot.iter().all(|&n| kept(n)), "every object read was kept");
    let cold_gone = (0..64u64).filter(|n| n % 2 == 1 && !kept(*n)).count();
    assert!(cold_gone >= 10, "{cold_gone}");
}

#[test]
fn a_small_store_has_few_shards_each_holding_its_largest_objects() {
    assert_eq!(Store::new(1 << 20, 1 << 20).shards(), 1);
    assert_eq!(Store::new(256 << 20, 8 << 20).shards(), 8);
    assert_eq!(Store::new(1 << 30, 1 << 10).shards(), 64);
    let s = Store::new(1 << 20, 1 << 20);
    let key: &[&[u8]] = &[b"/all"];
    // The whole store but its overhead: stored, alone.
    let o = s.insert(s.hash(key), key, parts((1 << 20) - 1024)).unwrap();
    assert_eq!(s.usage().1, 1);
    drop(o);
}

#[test]
fn too_large_objects_are_refused() {
    let s = Store::new(64 << 20, 1000);
    let key: &[&[u8]] = &[b"/big"];
    assert!(s.insert(s.hash(key), key, parts(1001)).is_none());
    assert!(s.insert(s.hash(key), key, parts(1000)).is_some());
}

#[test]
fn purges_by_what_the_objects_say() {
    let s = Store::new(64 << 20, 1 << 20);
    for i in 0..100 {
        let path = format!("/p/{i}");
        let key: &[&[u8]] = &[b"h", path.as_bytes()];
        let mut p = parts(10);
        if i % 4 == 0 {
            p.tags = vec![b"sale"[..].into()].into();
        }
        s.insert(s.hash(key), key, p).unwrap();
    }
    let tagged = s.purge(&|_, o| o.tags.iter().any(|t| &t[..] == b"sale"));
    assert_eq!(tagged, 25);
    let prefix = s.purge(&|k, _| key_parts(k).nth(1).is_some_and(|p| p.starts_with(b"/p/1")));
    // /p/1, /p/10..19 (12 and 16 went with the tag): 9 left.
    assert_eq!(prefix, 11 - 2);
    assert_eq!(s.usage().1, 100 - 25 - 9);
}

#[test]
fn freshness_and_age_follow_the_clock() {
    let s = Store::new(64 << 20, 1 << 20);
    let key: &[&[u8]] = &[b"/f"];
    let mut p = parts(1);
    let t0 = p.stored;
    p.initial_age = Duration::from_secs(10);
    p.fresh_for = Duration::from_secs(30);
    let o = s.insert(s.hash(key), key, p).unwrap();
    assert_eq!(o.age(t0 + Duration::from_secs(5)), Duration::from_secs(15));
    assert_eq!(o.fresh(t0), Ok(Duration::from_secs(20)));
    assert_eq!(
        o.fresh(t0 + Duration::from_secs(25)),
        Err(Duration::from_secs(5))
    );
}

/// The index's bytes per object (docs/cache.md gives the figure), and
/// what one object of a 1 KiB body is counted.
#[test]
fn the_overhead_per_object_is_counted() {
    println!("overhead per object: {OVERHEAD} bytes");
    let s = Store::new(64 << 20, 1 << 20);
    let key: &[&[u8]] = &[b"example.com", b"/one"];
    let p = parts(1024);
    let fields = p.fields.len();
    s.insert(s.hash(key), key, p).unwrap();
    let key_len = 4 + 11 + 4 + 4;
    assert_eq!(s.usage(), ((OVERHEAD + key_len + fields + 1024) as u64, 1));
}

/// A coded body is kept once per coding, counted with its object, and
/// dropped with it; one made for an object no longer stored is not kept.
#[test]
fn coded_bodies_are_counted_with_their_object_and_dropped_with_it() {
    let s = Store::new(1 << 20, 64 << 10);
    let key: &[&[u8]] = &[b"example.com", b"/coded"];
    let h = s.hash(key);
    let o = s.insert(h, key, parts(4096)).unwrap();
    let (alone, _) = s.usage();
    assert!(o.coded(0).is_none());
    assert!(s.add_coded(&o, 2, vec![1; 100].into()).is_ok());
    assert_eq!(o.coded(2), Some(&[1; 100][..]));
    let (with_one, _) = s.usage();
    assert_eq!(with_one, alone + 100 + CODED_OVERHEAD);
    // Made twice (two workers at once): the second is handed back.
    let again = s.add_coded(&o, 2, vec![2; 50].into());
    assert_eq!(again.unwrap_err().len(), 50);
    assert_eq!(o.coded(2), Some(&[1; 100][..]));
    assert!(s.add_coded(&o, 0, vec![3; 70].into()).is_ok());
    assert_eq!(s.usage().0, with_one + 70);
    assert!(s.add_coded(&o, CODINGS, vec![3; 7].into()).is_err());
    // The report counts the same.
    let mut seen = 0;
    s.each(&mut |_, _, size| seen += size);
    assert_eq!(seen, s.usage().0);
    // Dropped with the object; one no longer stored keeps nothing new.
    assert_eq!(s.remove(h, key), 1);
    assert_eq!(s.usage(), (0, 0));
    assert!(s.add_coded(&o, 1, vec![4; 10].into()).is_err());
    assert!(o.coded(1).is_none());
    // A replaced object is no longer the key's.
    let old = s.insert(h, key, parts(10)).unwrap();
    let _new = s.insert(h, key, parts(20)).unwrap();
    assert!(s.add_coded(&old, 0, vec![5; 10].into()).is_err());
}

/// Coded bodies count against the bound: growing an object past its
/// shard's share evicts.
#[test]
fn coded_bodies_evict_to_stay_in_bounds() {
    let s = Store::new(64 << 10, 16 << 10);
    assert_eq!(s.shards(), 1);
    let mut held = Vec::new();
    for i in 0..6u64 {
        let key: &[&[u8]] = &[b"h", &i.to_le_bytes()];
        held.push(s.insert(s.hash(key), key, parts(8 << 10)).unwrap());
    }
    let before = s.stats.evictions.load(Ordering::Relaxed);
    for o in &held {
        let _ = s.add_coded(o, 0, vec![0; 8 << 10].into());
    }
    assert!(s.usage().0 <= 64 << 10, "{:?}", s.usage());
    assert!(s.stats.evictions.load(Ordering::Relaxed) > before);
}
