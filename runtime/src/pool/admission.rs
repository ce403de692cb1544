//! What a state directory takes of pools and of the jobs submitted to
//! them: one rule for `skyc pool apply` and `skyc run --pool`, whether
//! the store is this machine's or a controller's (which applies it when
//! its client's stream has arrived, the client having planned against
//! the pool it was shown: [`Found`]).

use super::PoolPlan;
use crate::store::{Backend, GroupRow, Member, NewGroup, Store};
use crate::supervisor::PoolRequest;
use serde::{Deserialize, Serialize};

/// A live pool that takes jobs, as `run --pool` plans against it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Found {
    pub id: i64,
    pub name: String,
    pub backend: Backend,
    pub plan: PoolPlan,
}

/// The live pool `name`, if it takes jobs.
pub fn for_jobs(store: &Store, name: &str) -> Result<Found, String> {
    let row = store
        .live_pool(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "no pool named `{name}`; `skyc pool apply -p {name} POOL.yaml` creates it, \
                 `skyc pool status` lists the pools"
            )
        })?;
    if row.cancel_requested {
        return Err(format!(
            "pool `{name}` is going down; it takes no more jobs"
        ));
    }
    let plan = store.plan(row.id).map_err(|e| e.to_string())?;
    let plan: PoolPlan =
        serde_json::from_str(&plan).map_err(|e| format!("pool `{name}`'s plan: {e}"))?;
    Ok(Found {
        id: row.id,
        name: row.name,
        backend: row.backend,
        plan,
    })
}

/// Records jobs planned against `pool` (its id and name; none:
/// `--num-jobs` alone), ranked in order: refused when the pool went down,
/// or was replaced by another of its name, since they were planned.
pub fn record_jobs(
    store: &mut Store,
    pool: Option<(i64, &str)>,
    num_jobs: u32,
    jobs: Vec<NewGroup<'_>>,
) -> Result<Vec<i64>, String> {
    let jobs: Vec<(NewGroup<'_>, Option<Member>)> = jobs
        .into_iter()
        .zip(0..)
        .map(|(new, rank)| {
            let member = Member {
                pool: pool.map(|(id, _)| id),
                rank,
                num_jobs,
            };
            (new, Some(member))
        })
        .collect();
    let Some((id, name)) = pool else {
        return store.insert_jobs(&jobs).map_err(|e| e.to_string());
    };
    // Said as `run --pool` says it, when the pool is not the one planned
    // against; checked again as they are recorded, in one transaction.
    let now = for_jobs(store, name)?;
    if now.id != id {
        return Err(format!(
            "pool `{name}` was replaced while the jobs were planned: submit them again"
        ));
    }
    store
        .insert_pool_jobs(id, &jobs)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("pool `{name}` is going down; it takes no more jobs"))
}

/// The live pool `name` a file may be applied to on `backend` (`None`:
/// there is none, one is made): not one running elsewhere, nor one going
/// down.
pub fn applicable(store: &Store, name: &str, backend: Backend) -> Result<Option<GroupRow>, String> {
    let live = store.live_pool(name).map_err(|e| e.to_string())?;
    if let Some(pool) = live.as_ref().filter(|p| p.backend != backend) {
        return Err(format!(
            "pool `{}` runs on the {} target; take it down first to run it elsewhere",
            pool.name,
            pool.backend.as_str()
        ));
    }
    if let Some(pool) = &live {
        not_going_down(pool)?;
    }
    Ok(live)
}

/// Refuses a pool going down: it is applied again once it is down.
pub fn not_going_down(pool: &GroupRow) -> Result<(), String> {
    if pool.cancel_requested {
        return Err(format!(
            "pool `{}` is going down (`skyc pool status {}`); apply it again once it is down",
            pool.name, pool.name
        ));
    }
    Ok(())
}

/// What applying a pool file did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Created(i64),
    /// The live pool of that name takes the new plan: its new workers are
    /// made from it, its old ones retired as they become idle.
    Updated(i64),
}

impl Applied {
    /// As a controller answers it: `created ID`, `updated ID`.
    pub fn answer(self) -> String {
        match self {
            Applied::Created(id) => format!("created {id}"),
            Applied::Updated(id) => format!("updated {id}"),
        }
    }

    /// [`Applied::answer`] read back.
    pub fn parse(s: &str) -> Option<Self> {
        let (word, id) = s.trim().split_once(' ')?;
        let id = id.parse().ok()?;
        match word {
            "created" => Some(Applied::Created(id)),
            "updated" => Some(Applied::Updated(id)),
            _ => None,
        }
    }
}

/// Applies a pool file planned as `new` (its plan a [`PoolPlan`]): a new
/// pool, or the live one of its name given the new plan and files.
pub fn apply(store: &mut Store, new: &NewGroup<'_>) -> Result<Applied, String> {
    let Some(existing) = applicable(store, new.name, new.backend)? else {
        let id = store
            .insert_pool(new)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("a pool named `{}` was created meanwhile", new.name))?;
        return Ok(Applied::Created(id));
    };
    let plan = serde_json::from_str(new.plan).map_err(|e| format!("the pool's plan: {e}"))?;
    let request = serde_json::to_string(&PoolRequest::Apply(plan)).map_err(|e| e.to_string())?;
    // The new files are the pool's from now on: its new workers are given
    // them (its old ones keep theirs until retired).
    store
        .set_snapshots(existing.id, new.snapshots)
        .and_then(|()| store.set_bucket_uses(existing.id, new.buckets))
        .map_err(|e| e.to_string())?;
    if !store
        .request(existing.id, &request)
        .map_err(|e| e.to_string())?
    {
        return Err(format!("pool `{}` went down meanwhile", new.name));
    }
    Ok(Applied::Updated(existing.id))
}
