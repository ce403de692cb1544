//! The credentials a task's nodes mount its buckets with: the run's own,
//! narrowed by STS to the task's session policy (the spec's: its
//! buckets, what rclone does with them) and short-lived, asked for again
//! before they expire.
//!
//! - Long-term keys (an IAM user's): `GetFederationToken` with the
//!   policy, an hour at a time.
//! - A role (a profile's `role_arn`, a web identity): the chain's last
//!   `AssumeRole` made again with the policy as its session policy.
//! - Temporary credentials of a source with no role (IAM Identity
//!   Center, a `credential_process`, the container's or the instance's,
//!   keys with a session token): STS cannot narrow them, so the nodes are
//!   given the run's own, renewed with them.
//!
//! A refused narrowing (no `sts:GetFederationToken`, a policy too long)
//! is said once and tried again every few minutes; meanwhile an IAM
//! user's nodes are given a session token of the user
//! (`GetSessionToken`, which needs no permission; never the user's
//! keys), a role's the run's own. Each task's [`Delivery`] says which,
//! for `skyc status`.

use super::chain::{self, Base};
use super::fetch;
use super::{Fetched, Keeper, REFRESH_BEFORE};
use crate::aws::ec2::sigv4::Credentials;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// How long the credentials of `GetFederationToken` and
/// `GetSessionToken` last (the least STS gives is 15 minutes): each is
/// asked for again [`REFRESH_BEFORE`] their end.
const TOKEN_SECONDS: i32 = 3600;

/// After a refused narrowing, how long until it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(5 * 60);

/// What one task's nodes are given now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The credentials as the AWS configuration's `credential_process`
    /// prints them; `None`: none can be given (an IAM user's keys are
    /// never), and the nodes' setup waits.
    pub document: Option<String>,
    /// What they are, for `skyc status`.
    pub says: String,
}

/// The narrowed credentials of one session policy (tasks that mount the
/// same buckets share them).
struct Narrowed {
    fetched: Option<Fetched>,
    /// Whether `fetched` is narrowed (else a session token of the run's
    /// user, while narrowing is refused).
    narrowed: bool,
    /// The run's key they were made from: new run credentials (renewed,
    /// revoked) make them again.
    from: String,
    refused: Option<Refusal>,
}

struct Refusal {
    /// The first refusal's words (a retry's differ by STS's request id).
    why: String,
    /// When to try again.
    again: SystemTime,
}

/// The credentials every task that mounts buckets gives its nodes, kept
/// beside the run's [`Keeper`].
pub struct NodeCredentials {
    /// The federated user's name (`skyc-GROUP`, as STS allows it).
    name: String,
    /// Per task, its session policy and its buckets (for messages);
    /// `None`: it mounts none. Fixed for the run.
    tasks: Vec<Option<(String, String)>>,
    by_policy: BTreeMap<String, Narrowed>,
}

/// How the run's credentials are narrowed.
enum Narrowing {
    Federation(Credentials),
    /// The chain's last exchange with STS, with the policy.
    Session,
    /// They cannot be: what they are.
    Not(&'static str),
}

fn narrowing(chain: &chain::Chain) -> Narrowing {
    match &chain.base {
        _ if !chain.roles.is_empty() => Narrowing::Session,
        Base::WebIdentity { .. } => Narrowing::Session,
        Base::Keys { credentials, .. } if credentials.session_token.is_none() => {
            Narrowing::Federation(credentials.clone())
        }
        Base::Keys { .. } => Narrowing::Not("temporary keys (with a session token)"),
        Base::Process { .. } => Narrowing::Not("a credential_process's"),
        Base::Sso { .. } => Narrowing::Not("IAM Identity Center's"),
        Base::Container => Narrowing::Not("the container's"),
        Base::InstanceMetadata { .. } => Narrowing::Not("the instance role's"),
    }
}

impl NodeCredentials {
    /// The node credentials of group `group`, whose tasks' session
    /// policies are `policies` (`None`: the task mounts no bucket; `""`:
    /// its plan names none, made by an older skyc: its nodes get what a
    /// refused narrowing gives).
    pub fn new(group: &str, policies: Vec<Option<String>>) -> NodeCredentials {
        let mut name: String = format!("skyc-{group}")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_+=,.@-".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        name.truncate(32);
        let tasks = policies
            .into_iter()
            .map(|p| {
                p.map(|p| {
                    let buckets = buckets_of(&p);
                    (p, buckets)
                })
            })
            .collect();
        NodeCredentials {
            name,
            tasks,
            by_policy: BTreeMap::new(),
        }
    }

    /// Per task, what its nodes are given at `now` (`None`: it mounts no
    /// bucket), from `keeper`'s credentials of now, and the errors to
    /// show (each refusal once). Nothing while the keeper holds no
    /// credentials.
    pub async fn step(
        &mut self,
        keeper: &Keeper,
        now: SystemTime,
    ) -> (Vec<Option<Delivery>>, Vec<String>) {
        let mut errors = Vec::new();
        let Some((run, chain)) = keeper.held() else {
            return (vec![None; self.tasks.len()], errors);
        };
        let how = narrowing(&chain.0);
        let mut out = Vec::with_capacity(self.tasks.len());
        for task in &self.tasks {
            let Some((policy, buckets)) = task else {
                out.push(None);
                continue;
            };
            if let Narrowing::Not(what) = how {
                out.push(Some(Delivery {
                    document: Some(document(run)),
                    says: format!(
                        "the run's own AWS credentials ({what}: STS cannot narrow them to \
                         {buckets}), renewed with them"
                    ),
                }));
                continue;
            }
            let n = self.by_policy.entry(policy.clone()).or_insert(Narrowed {
                fetched: None,
                narrowed: false,
                from: String::new(),
                refused: None,
            });
            let due = match &n.refused {
                Some(r) => r.again <= now,
                None => {
                    expiring(n.fetched.as_ref(), now) || n.from != run.credentials.access_key_id
                }
            };
            if due {
                let ask = Ask {
                    keeper,
                    chain,
                    how: &how,
                    name: &self.name,
                    policy,
                    buckets,
                };
                errors.extend(n.renew(&ask, now).await);
            }
            out.push(Some(n.delivery(run, &how, buckets)));
        }
        (out, errors)
    }
}

/// Whether `fetched` is none, or to be asked for again at `now`.
fn expiring(fetched: Option<&Fetched>, now: SystemTime) -> bool {
    fetched.is_none_or(|f| f.expires.is_none_or(|e| e <= now + REFRESH_BEFORE))
}

/// What one renewal asks STS for.
struct Ask<'a> {
    keeper: &'a Keeper,
    chain: &'a super::Chain,
    how: &'a Narrowing,
    /// The federated user's name.
    name: &'a str,
    policy: &'a str,
    /// The policy's buckets, for messages.
    buckets: &'a str,
}

impl Narrowed {
    /// Asks STS for the policy's credentials again; the error to show
    /// when this starts a refusal. Refused, narrowed ones still valid are
    /// kept until they expire; else an IAM user's nodes get a session
    /// token of the user (never its keys), others the run's own
    /// (temporary: they cannot be narrowed at all otherwise).
    async fn renew(&mut self, ask: &Ask<'_>, now: SystemTime) -> Option<String> {
        let (access, region) = (ask.keeper.access(), ask.keeper.region());
        let (run, _) = ask.keeper.held()?;
        let from = run.credentials.access_key_id.clone();
        let got = if ask.policy.is_empty() {
            Err("the run's plan names no session policy (an older skyc made it)".to_owned())
        } else {
            match ask.how {
                Narrowing::Federation(keys) => {
                    fetch::federation_token(
                        access,
                        region,
                        keys,
                        ask.name,
                        ask.policy,
                        TOKEN_SECONDS,
                    )
                    .await
                }
                _ => fetch::fetch(&ask.chain.0, access, region, Some(ask.policy)).await,
            }
        };
        let why = match got {
            Ok(f) => {
                *self = Narrowed {
                    fetched: Some(f),
                    narrowed: true,
                    from,
                    refused: None,
                };
                return None;
            }
            Err(why) => why,
        };
        let kept = self
            .fetched
            .as_ref()
            .filter(|_| self.narrowed)
            .and_then(|f| f.expires)
            .filter(|e| *e > now);
        let again = kept.map_or(now + RETRY_AFTER, |e| e.min(now + RETRY_AFTER));
        let instead = if kept.is_some() {
            "the current ones last until they expire"
        } else {
            self.narrowed = false;
            self.from = from;
            match ask.how {
                Narrowing::Federation(keys) => {
                    if expiring(self.fetched.as_ref(), now) {
                        self.fetched = fetch::session_token(access, region, keys, TOKEN_SECONDS)
                            .await
                            .ok();
                    }
                    if self.fetched.is_some() {
                        "they are given a session token of the run's IAM user meanwhile"
                    } else {
                        "they are given none meanwhile (never the user's keys)"
                    }
                }
                _ => {
                    self.fetched = None;
                    "they are given the run's own meanwhile"
                }
            }
        };
        let first = self.refused.is_none();
        let why = self.refused.take().map_or(why, |r| r.why);
        let error = format!(
            "cannot narrow the AWS credentials of the nodes that mount {}: {why}; {instead}",
            ask.buckets
        );
        self.refused = Some(Refusal { why, again });
        first.then_some(error)
    }

    /// What the nodes are given now.
    fn delivery(&self, run: &Fetched, how: &Narrowing, buckets: &str) -> Delivery {
        let by = match how {
            Narrowing::Federation(_) => "STS GetFederationToken",
            _ => "the role's session policy",
        };
        let why = self.refused.as_ref().map_or("", |r| r.why.as_str());
        let every = RETRY_AFTER.as_secs() / 60;
        match (&self.fetched, how) {
            (Some(f), _) if self.narrowed => Delivery {
                document: Some(document(f)),
                says: format!("AWS credentials narrowed to {buckets} ({by}), short-lived"),
            },
            (Some(f), _) => Delivery {
                document: Some(document(f)),
                says: format!(
                    "short-lived AWS credentials of the run's IAM user (STS GetSessionToken), \
                     not narrowed to {buckets}: {why}; tried again every {every} minutes"
                ),
            },
            (None, Narrowing::Federation(_)) => Delivery {
                document: None,
                says: format!(
                    "none: the run's IAM user's credentials could not be narrowed to {buckets} \
                     ({why}) nor exchanged for a session token; tried again every {every} \
                     minutes"
                ),
            },
            (None, _) => Delivery {
                document: Some(document(run)),
                says: format!(
                    "the run's own AWS credentials, not narrowed to {buckets}: {why}; tried \
                     again every {every} minutes"
                ),
            },
        }
    }
}

/// The buckets a session policy names, for messages: `s3://a, s3://b`.
fn buckets_of(policy: &str) -> String {
    let doc: serde_json::Value = serde_json::from_str(policy).unwrap_or_default();
    let mut names: Vec<String> = doc["Statement"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["Resource"].as_array().into_iter().flatten())
        .filter_map(|r| r.as_str()?.split(":::").nth(1))
        .filter(|b| !b.contains('/'))
        .map(|b| format!("s3://{b}"))
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        "its buckets".to_owned()
    } else {
        names.join(", ")
    }
}

/// `credentials` as the AWS configuration's `credential_process` prints
/// them (its version 1 document): an SDK asks again once they expire.
fn document(credentials: &Fetched) -> String {
    let c = &credentials.credentials;
    let mut doc = serde_json::json!({
        "Version": 1,
        "AccessKeyId": c.access_key_id,
        "SecretAccessKey": c.secret_access_key,
    });
    if let Some(token) = &c.session_token {
        doc["SessionToken"] = serde_json::json!(token);
    }
    if let Some(t) = credentials
        .expires
        .and_then(|e| jiff::Timestamp::try_from(e).ok())
    {
        doc["Expiration"] = serde_json::json!(format!("{t:.0}"));
    }
    doc.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_names_its_buckets_once() {
        let p = r#"{"Statement":[{"Resource":["arn:aws:s3:::b","arn:aws:s3:::a"]},
            {"Resource":["arn:aws:s3:::b/*","arn:aws:s3:::a/*"]}]}"#;
        assert_eq!(buckets_of(p), "s3://a, s3://b");
        assert_eq!(buckets_of("{}"), "its buckets");
    }

    #[test]
    fn a_federated_users_name_is_what_sts_allows() {
        let n = NodeCredentials::new("rlhf policy/sync-with-a-very-long-name", Vec::new());
        assert_eq!(n.name, "skyc-rlhf-policy-sync-with-a-ver");
        assert_eq!(n.name.len(), 32);
    }
}
