//! An `aggregate` route as requests use it ([`AggregateRt`]): its parts
//! with their paths cut at their references, and the parts in
//! dependency levels (each level's parts wait only for earlier levels).

use std::sync::Arc;
use std::time::Duration;

use sluicegate_config::{AggregatePart, AggregateReference, PathTemplate};

use crate::observe::metrics::PartMetrics;

/// A piece of a part's path.
#[derive(Debug)]
pub enum Piece {
    /// Written as it is.
    Text(Box<[u8]>),
    /// The route's template parameter at this index, as in the path.
    Param(usize),
    /// A string or number in part `.0`'s answer, at this JSON path.
    Field(usize, Box<[Box<str>]>),
}

#[derive(Debug)]
pub struct PartRt {
    pub name: Box<str>,
    /// The service's place in the snapshot.
    pub service: u32,
    pub path: Box<[Piece]>,
    pub optional: bool,
    /// `None`: the service's `timeouts.request`.
    pub timeout: Option<Duration>,
    /// The parts whose answers its path reads.
    pub deps: Box<[usize]>,
    pub metrics: Arc<PartMetrics>,
}

#[derive(Debug)]
pub struct AggregateRt {
    /// In config order: the answer's members.
    pub parts: Box<[PartRt]>,
    /// Part indexes by level: level 0 waits for none, level n for some
    /// of level n-1 and none later.
    pub levels: Box<[Box<[usize]>]>,
}

impl AggregateRt {
    /// Compiles `parts` (validated) of a route whose path template is
    /// `template`; `service` gives a service's place by name.
    pub fn new(
        parts: &[AggregatePart],
        template: Option<&PathTemplate>,
        service: impl Fn(&str) -> Option<u32>,
        mut metrics: impl FnMut(&str) -> Arc<PartMetrics>,
    ) -> Result<AggregateRt, String> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let svc =
                service(&p.service).ok_or_else(|| format!("unknown service {}", p.service))?;
            let mut path = Vec::new();
            let mut deps = Vec::new();
            let mut from = 0;
            for (at, inner) in sluicegate_config::template_references(&p.path) {
                path.push(Piece::Text(p.path.as_bytes()[from..at.start].into()));
                from = at.end;
                match sluicegate_config::aggregate_reference(inner) {
                    Some(AggregateReference::Param(name)) => {
                        let i = template
                            .and_then(|t| t.param_index(name))
                            .ok_or_else(|| format!("part {}: no parameter {name}", p.name))?;
                        path.push(Piece::Param(i));
                    }
                    Some(AggregateReference::Field(part, steps)) => {
                        let j = parts
                            .iter()
                            .position(|q| q.name == part)
                            .ok_or_else(|| format!("part {}: no part {part}", p.name))?;
                        if !deps.contains(&j) {
                            deps.push(j);
                        }
                        path.push(Piece::Field(j, steps.into_iter().map(Into::into).collect()));
                    }
                    None => return Err(format!("part {}: bad reference {inner}", p.name)),
                }
            }
            path.push(Piece::Text(p.path.as_bytes()[from..].into()));
            out.push(PartRt {
                name: p.name.as_str().into(),
                service: svc,
                path: path.into(),
                optional: p.optional,
                timeout: p.timeout,
                deps: deps.into(),
                metrics: metrics(&p.name),
            });
        }
        // Levels: a part's is one more than the highest of its deps'.
        let mut level: Vec<Option<usize>> = vec![None; out.len()];
        for _ in 0..out.len() {
            for i in 0..out.len() {
                let mut l = 0;
                let mut known = true;
                for &d in out[i].deps.iter() {
                    match level[d] {
                        Some(ld) => l = l.max(ld + 1),
                        None => known = false,
                    }
                }
                if known {
                    level[i] = Some(l);
                }
            }
        }
        let mut levels: Vec<Vec<usize>> = Vec::new();
        for (i, l) in level.iter().enumerate() {
            let l = l.ok_or("parts wait for each other in a cycle")?;
            if levels.len() <= l {
                levels.resize_with(l + 1, Vec::new);
            }
            levels[l].push(i);
        }
        Ok(AggregateRt {
            parts: out.into(),
            levels: levels.into_iter().map(Into::into).collect(),
        })
    }
}
