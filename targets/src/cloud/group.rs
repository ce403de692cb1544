//! The Job Group rule (SkyPilot's `Optimizer.optimize_job_group`): every
//! task lands in one (cloud, region), the one where the whole group costs
//! least per hour: the sum over tasks of the task's cheapest offer there
//! times its `num_nodes`. The cloud is the target's, so only the region is
//! chosen here.
//!
//! Ties, which SkyPilot leaves to a Python set's order, are broken by
//! region name; within a region a task takes its cheapest offer, ties
//! broken by (candidate order, vCPUs, memory, accelerator count, type,
//! zone).

use super::select::{Offer, round_price};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// What one task can run on: its usable offers, each with the index of the
/// resource candidate it came from.
#[derive(Clone, Debug)]
pub struct TaskOffers {
    pub num_nodes: u32,
    pub offers: Vec<(usize, Offer)>,
}

/// A task's choice in the group's region.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub candidate: usize,
    pub offer: Offer,
}

/// Where the group runs, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub region: String,
    /// One per task, in task order.
    pub choices: Vec<Choice>,
    /// Every region all tasks can run in, with the group's hourly price
    /// there, cheapest first (the chosen one first).
    pub regions: Vec<(String, f64)>,
}

/// No region is shared by every task: each task's regions, sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoCommonRegion {
    pub regions: Vec<Vec<String>>,
}

/// Chooses the group's region and each task's offer there.
pub fn place(tasks: &[TaskOffers]) -> Result<Placement, NoCommonRegion> {
    let best: Vec<BTreeMap<&str, &(usize, Offer)>> = tasks
        .iter()
        .map(|t| {
            let mut by_region: BTreeMap<&str, &(usize, Offer)> = BTreeMap::new();
            for entry in &t.offers {
                let slot = by_region.entry(entry.1.region.as_str()).or_insert(entry);
                if better(entry, slot) == Ordering::Less {
                    *slot = entry;
                }
            }
            by_region
        })
        .collect();
    let Some(first) = best.first() else {
        return Err(NoCommonRegion {
            regions: Vec::new(),
        });
    };
    let mut scored: Vec<(String, f64)> = first
        .keys()
        .filter(|r| best.iter().all(|m| m.contains_key(*r)))
        .map(|r| {
            let total: f64 = best
                .iter()
                .zip(tasks)
                .map(|(m, t)| m[r].1.price * f64::from(t.num_nodes))
                .sum();
            ((*r).to_owned(), round_price(total))
        })
        .collect();
    scored.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let Some((region, _)) = scored.first().cloned() else {
        return Err(NoCommonRegion {
            regions: best
                .iter()
                .map(|m| m.keys().map(|r| (*r).to_owned()).collect())
                .collect(),
        });
    };
    let choices = best
        .iter()
        .map(|m| {
            let (candidate, offer) = m[region.as_str()];
            Choice {
                candidate: *candidate,
                offer: offer.clone(),
            }
        })
        .collect();
    Ok(Placement {
        region,
        choices,
        regions: scored,
    })
}

/// The order of two offers of one task in one region: cheaper first.
fn better(a: &(usize, Offer), b: &(usize, Offer)) -> Ordering {
    let key = |x: Option<f64>| x.unwrap_or(f64::INFINITY);
    a.1.price
        .total_cmp(&b.1.price)
        .then(a.0.cmp(&b.0))
        .then(key(a.1.vcpus).total_cmp(&key(b.1.vcpus)))
        .then(key(a.1.memory_gib).total_cmp(&key(b.1.memory_gib)))
        .then(
            key(a.1.accelerator.as_ref().map(|x| x.1)).total_cmp(&key(b
                .1
                .accelerator
                .as_ref()
                .map(|x| x.1))),
        )
        .then(a.1.instance_type.cmp(&b.1.instance_type))
        .then(a.1.zone.cmp(&b.1.zone))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(t: &str, region: &str, zone: Option<&str>, price: f64) -> Offer {
        Offer {
            instance_type: t.into(),
            accelerator: None,
            attached: false,
            vcpus: Some(8.0),
            memory_gib: Some(32.0),
            arch: None,
            region: region.into(),
            zone: zone.map(Into::into),
            zones: zone.map(|z| vec![z.to_owned()]).unwrap_or_default(),
            use_spot: false,
            price,
        }
    }

    #[test]
    fn the_lowest_total_over_tasks_and_nodes_wins() {
        // a is cheaper in r1, b (4 nodes) much cheaper in r2.
        let a = TaskOffers {
            num_nodes: 1,
            offers: vec![
                (0, offer("x", "r1", None, 1.0)),
                (0, offer("x", "r2", None, 2.0)),
            ],
        };
        let b = TaskOffers {
            num_nodes: 4,
            offers: vec![
                (0, offer("y", "r1", None, 1.0)),
                (0, offer("y", "r2", None, 0.5)),
            ],
        };
        let p = place(&[a, b]).unwrap();
        assert_eq!(p.region, "r2");
        assert_eq!(
            p.regions,
            vec![("r2".to_owned(), 4.0), ("r1".to_owned(), 5.0)]
        );
    }

    #[test]
    fn ties_go_to_the_region_name_then_the_candidate_order() {
        let a = TaskOffers {
            num_nodes: 1,
            offers: vec![
                (1, offer("late", "r2", None, 1.0)),
                (0, offer("early", "r2", None, 1.0)),
                (0, offer("early", "r1", None, 1.0)),
            ],
        };
        let p = place(&[a]).unwrap();
        assert_eq!(p.region, "r1");
        let a = TaskOffers {
            num_nodes: 1,
            offers: vec![
                (1, offer("late", "r2", None, 1.0)),
                (0, offer("early", "r2", None, 1.0)),
            ],
        };
        assert_eq!(place(&[a]).unwrap().choices[0].offer.instance_type, "early");
    }

    #[test]
    fn no_common_region_lists_each_tasks_regions() {
        let a = TaskOffers {
            num_nodes: 1,
            offers: vec![(0, offer("x", "r1", None, 1.0))],
        };
        let b = TaskOffers {
            num_nodes: 1,
            offers: vec![(0, offer("y", "r2", None, 1.0))],
        };
        let e = place(&[a, b]).unwrap_err();
        assert_eq!(
            e.regions,
            vec![vec!["r1".to_owned()], vec!["r2".to_owned()]]
        );
    }
}
