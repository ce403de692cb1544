//! A run's credentials in its group's thread: asked of the run's source
//! before each pass that needs them (none yet, expiring, or refused by
//! EC2), kept otherwise.

use super::files;
use super::{Access, Chain, Fetched};
use crate::aws::ec2::sigv4::Credentials;
use std::time::{Duration, SystemTime};

/// Temporary credentials are asked for again when less than this is
/// left of them, so no call is ever signed with expired ones (the SDKs
/// refresh within minutes of the expiry too).
pub const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// What the next pass works with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The client's credentials are still good.
    Keep,
    /// New credentials for the client.
    Use(Credentials),
    /// They could not be renewed, but the held ones are still valid: an
    /// error to show (once), the pass goes on.
    Warn(String),
    /// No usable credentials: the run is in this outage (nothing of it
    /// can be followed or terminated) until its source gives some.
    Outage(String),
}

pub struct Keeper {
    access: Access,
    /// The run's region, for sources and STS when the configuration
    /// names none.
    region: String,
    held: Option<(Fetched, Chain)>,
    /// EC2's refusal of the held credentials.
    refused: Option<String>,
}

impl Keeper {
    pub fn new(access: Access, region: String) -> Keeper {
        Keeper {
            access,
            region,
            held: None,
            refused: None,
        }
    }

    pub fn access(&self) -> &Access {
        &self.access
    }

    /// The credentials held now (and when they expire), and the chain
    /// they came from.
    pub fn held(&self) -> Option<(&Fetched, &Chain)> {
        self.held.as_ref().map(|(f, c)| (f, c))
    }

    /// The run's region.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// EC2 refused the held credentials (expired, revoked, rotated):
    /// the next [`Keeper::step`] asks the source again.
    pub fn refused(&mut self, why: String) {
        self.refused = Some(why);
    }

    /// The credentials for a pass at `now`.
    pub async fn step(&mut self, now: SystemTime) -> Step {
        let due = match &self.held {
            None => true,
            Some((f, _)) => {
                self.refused.is_some() || f.expires.is_some_and(|e| e <= now + REFRESH_BEFORE)
            }
        };
        if !due {
            return Step::Keep;
        }
        let env = |k: &str| std::env::var(k).ok();
        let got = match self.access.again(&env, &files::read_file) {
            Err(e) => Err((e.to_string(), None)),
            Ok(chain) => match chain.fetch(&self.access, &self.region).await {
                Ok(f) => Ok((f, chain)),
                Err(e) => Err((format!("{}: {e}", chain.describe()), Some(chain))),
            },
        };
        let until = "Until then the run's instances are neither followed nor terminated";
        match got {
            Ok((fetched, chain)) => {
                let same = self
                    .held
                    .as_ref()
                    .is_some_and(|(f, _)| f.credentials == fetched.credentials);
                if let (true, Some(why)) = (same, &self.refused) {
                    // Kept refused: the next pass asks again.
                    return Step::Outage(format!(
                        "{why}. The run's credentials, from {}, are the same when asked \
                         again: {}. {until}",
                        chain.describe(),
                        chain.renew()
                    ));
                }
                self.refused = None;
                let credentials = fetched.credentials.clone();
                self.held = Some((fetched, chain));
                if same {
                    Step::Keep
                } else {
                    Step::Use(credentials)
                }
            }
            Err((why, chain)) => {
                let valid = self.refused.is_none()
                    && self
                        .held
                        .as_ref()
                        .and_then(|(f, _)| f.expires)
                        .is_some_and(|e| e > now);
                if valid {
                    let expires = self
                        .held
                        .as_ref()
                        .and_then(|(f, _)| f.expires)
                        .and_then(|e| jiff::Timestamp::try_from(e).ok())
                        .map_or_else(String::new, |t| format!(" until {t:.0}"));
                    return Step::Warn(format!(
                        "cannot renew the run's AWS credentials ({why}); the current ones \
                         last{expires}"
                    ));
                }
                let renew = chain
                    .as_ref()
                    .or(self.held.as_ref().map(|(_, c)| c))
                    .map(Chain::renew);
                Step::Outage(match renew {
                    Some(renew) => format!(
                        "cannot get the run's AWS credentials from {why}. To renew: {renew}. {until}"
                    ),
                    None => format!("cannot get the run's AWS credentials: {why}. {until}"),
                })
            }
        }
    }
}
