#![doc = include_str!("internal.md")]

pub mod architecture {
    #![doc = include_str!("architecture.md")]
}

pub mod threading {
    #![doc = include_str!("threading.md")]
}
