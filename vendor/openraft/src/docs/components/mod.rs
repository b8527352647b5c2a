//! Components and sub systems of the openraft project.
//!
//! - [`StateMachine`](state_machine)

pub mod state_machine {
    #![doc = include_str!("state-machine.md")]
}
