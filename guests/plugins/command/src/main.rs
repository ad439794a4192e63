//! A plain WASI command component, not a weft plugin: the host must refuse to load it.

fn main() {
    println!("hi");
}
