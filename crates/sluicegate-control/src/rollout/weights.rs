//! A rollout's weights as percentage points: the canary's share of the
//! split's total, and the weights a new share gives every entry (the
//! canary's share itself, the others the rest, 100 in all, in the ratios
//! they had between them).

/// The canary's (last entry's) share of `weights`, in whole percentage
/// points (rounded); 0 for an empty or all-zero split.
pub(crate) fn share(weights: &[u64]) -> u32 {
    let total: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let Some(&last) = weights.last() else {
        return 0;
    };
    if total == 0 {
        return 0;
    }
    ((u128::from(last) * 200 + total) / (total * 2)) as u32
}

/// The weights that give the canary `canary` points (at most 100): the
/// other entries share `100 - canary` in the ratios of their weights now
/// (largest remainders get the points rounding leaves; ties to the first
/// entries), or evenly when they are all 0.
pub(crate) fn scaled(weights: &[u64], canary: u32) -> Vec<u64> {
    let canary = canary.min(100);
    let Some((_, others)) = weights.split_last() else {
        return Vec::new();
    };
    let rest = u128::from(100 - canary);
    let mut out: Vec<u64> = Vec::with_capacity(weights.len());
    if others.is_empty() {
        out.push(100);
        return out;
    }
    let even = others.iter().all(|&w| w == 0);
    let of = |w: u64| if even { 1u128 } else { u128::from(w) };
    let total: u128 = others.iter().map(|&w| of(w)).sum();
    let mut remainders: Vec<(u128, usize)> = Vec::with_capacity(others.len());
    let mut given = 0u128;
    for (i, &w) in others.iter().enumerate() {
        let exact = of(w) * rest;
        out.push((exact / total) as u64);
        given += exact / total;
        remainders.push((exact % total, i));
    }
    // Largest remainder first; ties to the first entry.
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take((rest - given) as usize) {
        out[i] += 1;
    }
    out.push(u64::from(canary));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_the_last_entrys_part_of_the_total() {
        assert_eq!(share(&[95, 5]), 5);
        assert_eq!(share(&[1, 1]), 50);
        assert_eq!(share(&[300, 100]), 25);
        assert_eq!(share(&[2, 1]), 33);
        assert_eq!(share(&[1, 2]), 67);
        assert_eq!(share(&[0, 7]), 100);
        assert_eq!(share(&[7, 0]), 0);
        assert_eq!(share(&[]), 0);
        assert_eq!(share(&[0, 0]), 0);
    }

    #[test]
    fn new_weights_total_100_and_keep_the_others_ratios() {
        assert_eq!(scaled(&[95, 5], 15), [85, 15]);
        assert_eq!(scaled(&[95, 5], 0), [100, 0]);
        assert_eq!(scaled(&[95, 5], 100), [0, 100]);
        assert_eq!(scaled(&[95, 5], 250), [0, 100]);
        // 2:1 between the others, 90 points to share: 60 and 30.
        assert_eq!(scaled(&[200, 100, 0], 10), [60, 30, 10]);
        // 1:1:1 sharing 80: 27, 27, 26 (the first ones take the leftover).
        assert_eq!(scaled(&[5, 5, 5, 3], 20), [27, 27, 26, 20]);
        // Others all 0 (after a promotion): shared evenly.
        assert_eq!(scaled(&[0, 0, 100], 50), [25, 25, 50]);
        for c in 0..=100 {
            let w = scaled(&[3, 7, 11, 1], c);
            assert_eq!(w.iter().sum::<u64>(), 100);
            assert_eq!(w[3], u64::from(c));
            assert_eq!(share(&w), c);
        }
    }
}
