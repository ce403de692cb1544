//! The control plane: the run's instances driven to what the engine's
//! state asks, from the run as the provider shows it
//! ([`World`](crate::cloud::world::World)). [`observe`] and [`reconcile`]
//! are pure, where the engine meets the provider (instances to engine
//! events, the engine's [`Goal`](crate::reconciler::goal::Goal) to
//! operations); the [`Provider`](crate::cloud::Provider) carries those
//! out, each safe to repeat; [`pass`] is one turn of the loop.

pub mod observe;
pub mod pass;
pub mod reconcile;
