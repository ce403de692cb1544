//! The control plane: the run's instances on EC2 driven to what the
//! engine's state asks, from the run as EC2 shows it
//! ([`World`](crate::aws::world::World)). [`observe`]
//! and [`reconcile`] are pure, where the engine meets EC2 (instances to
//! engine events, the engine's [`Goal`](crate::goal::Goal) to EC2
//! operations); [`ops`] carries those out, each safe to repeat; [`pass`]
//! is one turn of the loop; [`files`] is the run's files' bucket.

pub mod files;
pub mod observe;
pub mod ops;
pub mod pass;
pub mod reconcile;
