//! The `toolward` command.
fn main() {}
