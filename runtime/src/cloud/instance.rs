//! A cloud instance as the cloud runtime reads it, whichever provider
//! runs it: its id, state and why, addresses, zone, type and tags (each
//! node's attempt is found by its tags, [`crate::cloud::world`]).

use std::collections::BTreeMap;

/// An instance's lifecycle state, in EC2's names (`instanceState.name`):
/// a provider maps its own states onto them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
    Stopping,
    Stopped,
}

impl State {
    pub fn parse(name: &str) -> Option<State> {
        Some(match name {
            "pending" => State::Pending,
            "running" => State::Running,
            "shutting-down" => State::ShuttingDown,
            "terminated" => State::Terminated,
            "stopping" => State::Stopping,
            "stopped" => State::Stopped,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::ShuttingDown => "shutting-down",
            State::Terminated => "terminated",
            State::Stopping => "stopping",
            State::Stopped => "stopped",
        }
    }

    /// Going or gone for good: the instance will never run again.
    pub fn is_ending(self) -> bool {
        matches!(self, State::ShuttingDown | State::Terminated)
    }

    /// Not running, and not about to be (stopped counts: skyc never starts
    /// a stopped instance again, and a rebooted node's task is not resumed).
    pub fn is_down(self) -> bool {
        !matches!(self, State::Pending | State::Running)
    }
}

/// One instance, as the provider reports it (EC2: DescribeInstances or
/// RunInstances).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    /// `None` for a state name this client does not know.
    pub state: Option<State>,
    /// Why it is in its state (EC2: `stateReason.code`), e.g.
    /// `Server.SpotInstanceTermination`, `Client.UserInitiatedShutdown`.
    pub reason_code: Option<String>,
    pub reason_message: Option<String>,
    pub instance_type: String,
    pub zone: Option<String>,
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    /// `spot` for spot instances.
    pub lifecycle: Option<String>,
    /// The launch's idempotency token (EC2's `ClientToken`).
    pub client_token: Option<String>,
    pub key_name: Option<String>,
    pub tags: BTreeMap<String, String>,
}
