//! Writes the macros through which the SDK's export macros (`handler!`, `controller!`,
//! `handler_v0_1!`) generate their world's glue in the guest crate: `wit_bindgen::generate!`
//! resolves `path` against the crate it expands in, so the SDK's WIT folders are given to it
//! as absolute paths, which only a build script knows.

use std::path::Path;
use std::{env, fs};

fn main() {
    let sdk = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let path = |dir: &str| {
        let p = Path::new(&sdk).join(dir);
        // `{:?}` spells the path as a Rust string literal (quotes and backslashes escaped).
        format!("{:?}", p.to_str().expect("the SDK's path is UTF-8"))
    };
    let macros = format!(
        r#"/// `wit_bindgen::generate!` over the SDK's `wit/` (kubewasm:handler@0.3.0).
#[doc(hidden)]
#[macro_export]
macro_rules! __kubewasm_generate_v0_3 {{
    ($($options:tt)*) => {{
        $crate::__wit_bindgen::generate!({{ path: {}, $($options)* }});
    }};
}}

/// `wit_bindgen::generate!` over the SDK's `wit-0.1.0/` (kubewasm:handler@0.1.0).
#[doc(hidden)]
#[macro_export]
macro_rules! __kubewasm_generate_v0_1 {{
    ($($options:tt)*) => {{
        $crate::__wit_bindgen::generate!({{ path: {}, $($options)* }});
    }};
}}
"#,
        path("wit"),
        path("wit-0.1.0"),
    );
    fs::write(Path::new(&out).join("generate.rs"), macros).expect("OUT_DIR is writable");
    println!("cargo:rerun-if-changed=build.rs");
}
