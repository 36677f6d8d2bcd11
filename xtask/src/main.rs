mod codegen;
mod setup;
fn main() {}
