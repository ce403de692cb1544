//! Leader election with a `coordination.k8s.io` Lease, as client-go's
//! `leaderelection` does it, and the fence the leader's every action
//! passes: of the controller's replicas, one supervises; a second one,
//! or an old pod still running on a node cut off from the cluster, never
//! acts (docs/controller.md).
//!
//! - **Who leads** is the Lease's `holderIdentity`. A replica takes the
//!   Lease when none exists, when it names no holder, or when its record
//!   has not changed for its `leaseDurationSeconds` *as this replica has
//!   watched it* (its own clock, from when it first saw that record: the
//!   cluster's clocks and the holder's need not agree with its own).
//!   Taking and renewing are updates that name the resource version read,
//!   so of two replicas that try at once the API server lets one through.
//! - **The fence.** A renewal that succeeds lets the leader act until the
//!   instant it was sent plus [`Timing::renew_deadline`], shorter than the
//!   Lease's duration: a leader that cannot renew stops acting before any
//!   other replica may take the Lease. [`Fence::holds`] is what the
//!   leader asks before each action.
//!
//! [`decide`] is pure; [`Elector`] reads and writes the Lease through the
//! API server; [`Fenced`] is the leader's Kubernetes client: a request
//! that changes anything is not sent once the fence does not hold.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The Lease's timing, as client-go's defaults.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a record unchanged means its holder is gone.
    pub duration: Duration,
    /// How long after a renewal was sent the leader may act without
    /// another; shorter than [`duration`](Self::duration).
    pub renew_deadline: Duration,
    /// Between two rounds.
    pub retry: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// What a Lease says, as far as an election reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub holder: Option<String>,
    pub duration_seconds: i32,
    pub transitions: i32,
    /// The API server's version of the object: updates name it.
    pub version: String,
}

/// A record, and when this replica first saw it as it is.
#[derive(Clone, Debug)]
pub struct Observed {
    pub record: Record,
    pub since: Instant,
    /// When its holder acquired it, as the Lease says.
    pub acquired: Option<MicroTime>,
}

/// What a round does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No Lease yet: make it, held.
    Create,
    /// Take it from a holder gone (or none).
    Take,
    /// Held by this replica: renew it.
    Renew,
    /// Another replica holds it: look again later.
    Wait,
}

/// What replica `me` does with the Lease as observed, at `now`.
pub fn decide(observed: Option<&Observed>, me: &str, now: Instant) -> Decision {
    let Some(o) = observed else {
        return Decision::Create;
    };
    match o.record.holder.as_deref() {
        Some(h) if h == me => Decision::Renew,
        None | Some("") => Decision::Take,
        Some(_) => {
            let lasts = Duration::from_secs(o.record.duration_seconds.max(1) as u64);
            if now >= o.since + lasts {
                Decision::Take
            } else {
                Decision::Wait
            }
        }
    }
}

/// Until when the leader may act, shared with whatever acts for it.
#[derive(Clone, Debug, Default)]
pub struct Fence(Arc<Mutex<Option<Instant>>>);

impl Fence {
    /// Whether this replica leads now: its last renewal is recent enough
    /// that no other can have taken the Lease.
    pub fn holds(&self) -> bool {
        self.holding().is_some()
    }

    /// Until when, if it holds now.
    pub fn holding(&self) -> Option<Instant> {
        self.until().filter(|u| Instant::now() < *u)
    }

    pub fn until(&self) -> Option<Instant> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn extend(&self, until: Instant) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(until);
    }

    fn drop_lead(&self) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    me: String,
    timing: Timing,
    observed: Option<Observed>,
    /// When this replica last saw another hold the Lease: a Lease gone or
    /// emptied since is not made or taken before a duration has passed
    /// (its holder may still be acting on its last renewal).
    other_seen: Option<Instant>,
    fence: Fence,
}

/// Why a round could not be had.
#[derive(Debug)]
pub enum Error {
    Kube(kube::Error),
    /// No answer within the time given.
    Unanswered(Duration),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Kube(e) => write!(f, "{e}"),
            Error::Unanswered(limit) => {
                write!(f, "the API server did not answer within {limit:?}")
            }
        }
    }
}

/// How a round ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Round {
    /// This replica leads, fenced until the instant.
    Leads(Instant),
    /// Another does (`holder`).
    Follows(Option<String>),
}

impl Elector {
    /// Replica `me` of the Lease `name` in `api`'s namespace.
    pub fn new(api: Api<Lease>, name: &str, me: &str, timing: Timing) -> Self {
        Self {
            api,
            name: name.to_owned(),
            me: me.to_owned(),
            timing,
            observed: None,
            other_seen: None,
            fence: Fence::default(),
        }
    }

    /// What acts for this replica asks.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// One round: the Lease read, then made, taken or renewed when this
    /// replica may. An answer of the API server other than a lost race,
    /// or none within half the renew deadline, is the caller's: it leaves
    /// the fence as it is (it runs out).
    pub async fn round(&mut self) -> Result<Round, Error> {
        // The leader's deadline counts from before it asked; a follower's
        // watch of a record, from when it had the answer.
        let sent = Instant::now();
        let lease = self.timed(self.api.get_opt(&self.name)).await?;
        let read = Instant::now();
        self.observe(lease.as_ref(), read);
        let decision = match decide(self.observed.as_ref(), &self.me, read) {
            // Gone or emptied while another held it: not before it could
            // have renewed for the last time.
            Decision::Create | Decision::Take
                if self
                    .observed
                    .as_ref()
                    .is_none_or(|o| o.record.holder.as_deref().is_none_or(str::is_empty))
                    && self
                        .other_seen
                        .is_some_and(|at| read < at + self.timing.duration) =>
            {
                Decision::Wait
            }
            d => d,
        };
        let written = match decision {
            Decision::Wait => None,
            Decision::Create => {
                let lease = self.lease(None, 0);
                Some(
                    self.timed(self.api.create(&PostParams::default(), &lease))
                        .await,
                )
            }
            Decision::Take | Decision::Renew => {
                let Some(o) = &self.observed else {
                    return Ok(Round::Follows(None));
                };
                let held = o.record.holder.as_deref() == Some(self.me.as_str());
                let transitions = o.record.transitions + i32::from(!held);
                let mut lease = self.lease(Some(o.record.version.clone()), transitions);
                // A renewal keeps when the Lease was acquired.
                if held && let Some(spec) = lease.spec.as_mut() {
                    spec.acquire_time.clone_from(&o.acquired);
                }
                Some(
                    self.timed(self.api.replace(&self.name, &PostParams::default(), &lease))
                        .await,
                )
            }
        };
        match written {
            None => {
                self.fence.drop_lead();
                Ok(Round::Follows(
                    self.observed.as_ref().and_then(|o| o.record.holder.clone()),
                ))
            }
            Some(Ok(lease)) => {
                self.observe(Some(&lease), sent);
                let until = sent + self.timing.renew_deadline;
                self.fence.extend(until);
                Ok(Round::Leads(until))
            }
            // Another replica wrote first: it leads.
            Some(Err(Error::Kube(kube::Error::Api(e)))) if e.code == 409 => {
                self.fence.drop_lead();
                self.observed = None;
                self.other_seen = Some(Instant::now());
                Ok(Round::Follows(None))
            }
            Some(Err(e)) => Err(e),
        }
    }

    /// A request of the election, given half the renew deadline: a
    /// renewal that cannot finish by then would not keep the fence.
    async fn timed<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Error> {
        let limit = self.timing.renew_deadline / 2;
        match tokio::time::timeout(limit, request).await {
            Ok(answer) => answer.map_err(Error::Kube),
            Err(_) => Err(Error::Unanswered(limit)),
        }
    }

    /// Rounds until this replica leads: a follower waits here. `heard`
    /// is told each round that does not make it lead: the holder it
    /// follows, or why the round failed.
    pub async fn lead(&mut self, mut heard: impl FnMut(Result<Option<&str>, &Error>)) {
        loop {
            match self.round().await {
                Ok(Round::Leads(_)) => return,
                Ok(Round::Follows(holder)) => heard(Ok(holder.as_deref())),
                Err(e) => heard(Err(&e)),
            }
            tokio::time::sleep(self.timing.retry).await;
        }
    }

    /// Renews every [`Timing::retry`] while this replica leads; returns
    /// once it does not: another holds the Lease, or the fence ran out
    /// (no renewal got through in time, or one came back too late). A
    /// replica that stopped leading does not lead again here: what acted
    /// for it has stopped, and starts again only by [`lead`](Self::lead).
    pub async fn keep(&mut self) {
        loop {
            tokio::time::sleep(self.timing.retry).await;
            match self.round().await {
                Ok(Round::Follows(_)) => return,
                _ if !self.fence.holds() => {
                    self.fence.drop_lead();
                    return;
                }
                _ => {}
            }
        }
    }

    fn observe(&mut self, lease: Option<&Lease>, now: Instant) {
        if let Some(holder) = lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.holder_identity.as_deref())
            && !holder.is_empty()
            && holder != self.me
        {
            self.other_seen = Some(now);
        }
        let seen = lease.map(|l| {
            let spec = l.spec.clone().unwrap_or_default();
            let record = Record {
                holder: spec.holder_identity,
                duration_seconds: spec.lease_duration_seconds.unwrap_or(15),
                transitions: spec.lease_transitions.unwrap_or(0),
                version: l.metadata.resource_version.clone().unwrap_or_default(),
            };
            (record, spec.acquire_time)
        });
        self.observed = match (seen, self.observed.take()) {
            (None, _) => None,
            // The same record: watched since it was first seen.
            (Some((r, _)), Some(o)) if r == o.record => Some(o),
            (Some((record, acquired)), _) => Some(Observed {
                record,
                since: now,
                acquired,
            }),
        };
    }

    /// The Lease as this replica writes it, held.
    fn lease(&self, version: Option<String>, transitions: i32) -> Lease {
        let now = MicroTime(jiff::Timestamp::now());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: version,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.me.clone()),
                lease_duration_seconds: Some(self.timing.duration.as_secs().max(1) as i32),
                lease_transitions: Some(transitions),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..LeaseSpec::default()
            }),
        }
    }
}

/// What a fenced client answers a write it did not send.
#[derive(Debug)]
pub struct NotLeading;

impl std::fmt::Display for NotLeading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("this controller does not hold its Lease: nothing is changed on the cluster")
    }
}

impl std::error::Error for NotLeading {}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client's service whose requests that change anything pass the fence:
/// every method but `GET`, and a `GET` that upgrades the connection (a
/// command run in a pod, `pods/exec`). Such a request is sent only while
/// the fence holds, and abandoned if it has no answer when the fence
/// ends.
#[derive(Clone)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

impl<S> Fenced<S> {
    pub fn new(inner: S, fence: Fence) -> Self {
        Self { inner, fence }
    }
}

/// [`Fenced`], as a layer of kube's client stack.
#[derive(Clone)]
pub struct FenceLayer(pub Fence);

impl<S> tower_layer::Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced::new(inner, self.0.clone())
    }
}

/// Whether a request changes anything on the cluster.
fn writes<B>(req: &http::Request<B>) -> bool {
    req.method() != http::Method::GET || req.headers().contains_key(http::header::UPGRADE)
}

impl<S, B> tower_service::Service<http::Request<B>> for Fenced<S>
where
    S: tower_service::Service<http::Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if !writes(&req) {
            let answer = self.inner.call(req);
            return Box::pin(async move { answer.await.map_err(Into::into) });
        }
        let Some(until) = self.fence.holding() else {
            return Box::pin(std::future::ready(Err(NotLeading.into())));
        };
        // A write not answered by the fence's end is abandoned there
        // (its connection dropped): none is still on its way when
        // another replica may lead.
        let answer = self.inner.call(req);
        Box::pin(async move {
            match tokio::time::timeout_at(until, answer).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(NotLeading.into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(holder: Option<&str>, since: Instant) -> Observed {
        Observed {
            record: Record {
                holder: holder.map(str::to_owned),
                duration_seconds: 15,
                transitions: 0,
                version: "1".into(),
            },
            since,
            acquired: None,
        }
    }

    #[test]
    fn a_lease_is_taken_only_when_its_holder_is_gone() {
        let t0 = Instant::now();
        assert_eq!(decide(None, "a", t0), Decision::Create);
        assert_eq!(
            decide(Some(&observed(Some("a"), t0)), "a", t0),
            Decision::Renew
        );
        assert_eq!(decide(Some(&observed(None, t0)), "a", t0), Decision::Take);
        assert_eq!(
            decide(Some(&observed(Some(""), t0)), "a", t0),
            Decision::Take
        );
        let b = observed(Some("b"), t0);
        assert_eq!(decide(Some(&b), "a", t0), Decision::Wait);
        assert_eq!(
            decide(Some(&b), "a", t0 + Duration::from_millis(14_999)),
            Decision::Wait
        );
        assert_eq!(
            decide(Some(&b), "a", t0 + Duration::from_secs(15)),
            Decision::Take
        );
    }
}
