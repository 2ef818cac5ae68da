//! `kubewasm-guest-tool`: the few `wasm-tools` / `wit-bindgen` operations the guest examples need,
//! built from the same library crates so no global `cargo install` is required.
//!
//! ```text
//! kubewasm-guest-tool bindgen <wit-dir> <out-dir> [world]        C bindings (wit-bindgen's C generator)
//! kubewasm-guest-tool componentize <wit-dir> <core.wasm> <out.wasm> [world]
//!                                                                embed the world, apply the WASI p1 reactor adapter
//! kubewasm-guest-tool wit <component.wasm>                       print the component's WIT world
//! kubewasm-guest-tool check <wit-dir> <component.wasm> [world]   verify the component implements the world
//! kubewasm-guest-tool go-adapter-arena <core.wasm> <out.wasm>    (experimental, Go) see guest-examples/go
//! ```

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use wit_component::{ComponentEncoder, DecodedWasm, StringEncoding, WitPrinter};
use wit_parser::{Resolve, WorldId, WorldItem, WorldKey};

const DEFAULT_WORLD: &str = "handler";

/// WASI packages the kubewasm host links (WASI preview 2 cli, io, clocks, random, filesystem, sockets).
const HOST_WASI_PACKAGES: &[&str] = &[
    "wasi:cli",
    "wasi:io",
    "wasi:clocks",
    "wasi:random",
    "wasi:filesystem",
    "wasi:sockets",
];

const USAGE: &str = "usage:
  kubewasm-guest-tool bindgen <wit-dir> <out-dir> [world]
  kubewasm-guest-tool componentize <wit-dir> <core.wasm> <out.wasm> [world]
  kubewasm-guest-tool wit <component.wasm>
  kubewasm-guest-tool check <wit-dir> <component.wasm> [world]
  kubewasm-guest-tool go-adapter-arena <core.wasm> <out.wasm>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["bindgen", wit, out, rest @ ..] if rest.len() <= 1 => bindgen(wit, out, rest.first()),
        ["componentize", wit, core, out, rest @ ..] if rest.len() <= 1 => {
            componentize(wit, core, out, rest.first())
        }
        ["wit", component] => print_wit(component),
        ["go-adapter-arena", core, out] => go_adapter_arena(core, out),
        ["check", wit, component, rest @ ..] if rest.len() <= 1 => {
            check(wit, component, rest.first())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Parses the WIT directory and selects the world.
fn load_world(wit_dir: &str, world: Option<&&str>) -> Result<(Resolve, WorldId)> {
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve
        .push_path(wit_dir)
        .with_context(|| format!("parsing WIT in {wit_dir}"))?;
    let world = resolve.select_world(&[pkg], Some(world.copied().unwrap_or(DEFAULT_WORLD)))?;
    Ok((resolve, world))
}

fn read(path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {path}"))
}

fn bindgen(wit_dir: &str, out_dir: &str, world: Option<&&str>) -> Result<()> {
    let (mut resolve, world) = load_world(wit_dir, world)?;
    // Also writes `<world>_component_type.o`, the world's metadata as a wasm object to link in.
    let opts = wit_bindgen_c::Opts::default();
    let mut files = wit_bindgen_core::Files::default();
    opts.build().generate(&mut resolve, world, &mut files)?;
    let out = Path::new(out_dir);
    std::fs::create_dir_all(out).with_context(|| format!("creating {out_dir}"))?;
    for (name, contents) in files.iter() {
        let path = out.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

fn componentize(wit_dir: &str, core: &str, out: &str, world: Option<&&str>) -> Result<()> {
    let (resolve, world) = load_world(wit_dir, world)?;
    let mut module = read(core)?;
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)?;
    let component = ComponentEncoder::default()
        .module(&module)?
        .validate(true)
        .adapter(
            "wasi_snapshot_preview1",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
        .with_context(|| format!("making a component of {core}"))?;
    std::fs::write(out, &component).with_context(|| format!("writing {out}"))?;
    Ok(())
}

fn decode_component(path: &str) -> Result<(Resolve, WorldId)> {
    match wit_component::decode(&read(path)?).with_context(|| format!("decoding {path}"))? {
        DecodedWasm::Component(resolve, world) => Ok((resolve, world)),
        DecodedWasm::WitPackage(..) => bail!("{path} is a WIT package, not a component"),
    }
}

fn print_wit(path: &str) -> Result<()> {
    let (resolve, world) = decode_component(path)?;
    let main = resolve.worlds[world]
        .package
        .context("decoded world has no package")?;
    let nested: Vec<_> = resolve
        .packages
        .iter()
        .map(|(id, _)| id)
        .filter(|id| *id != main)
        .collect();
    let mut printer = WitPrinter::default();
    printer.print(&resolve, main, &nested)?;
    println!("{}", printer.output);
    Ok(())
}

/// Checks that the component implements the world's exports (extra ones are reported), imports nothing outside the
/// world except WASI packages the host provides, and that all types match (via
/// `wit_component::targets` against the world extended with the component's WASI imports).
fn check(wit_dir: &str, path: &str, world_name: Option<&&str>) -> Result<()> {
    let (mut resolve, world) = load_world(wit_dir, world_name)?;
    let bytes = read(path)?;
    let (component_resolve, component_world) = decode_component(path)?;

    let expected_exports: BTreeSet<String> = resolve.worlds[world]
        .exports
        .keys()
        .map(|k| resolve.name_world_key(k))
        .collect();
    let world_imports: BTreeSet<String> = resolve.worlds[world]
        .imports
        .iter()
        .filter(|(_, item)| matches!(item, WorldItem::Interface { .. }))
        .map(|(k, _)| resolve.name_world_key(k))
        .collect();

    let cw = &component_resolve.worlds[component_world];
    let exports: BTreeSet<String> = cw
        .exports
        .keys()
        .map(|k| component_resolve.name_world_key(k))
        .collect();
    let missing: Vec<_> = expected_exports.difference(&exports).collect();
    if !missing.is_empty() {
        bail!("{path}: does not export {missing:?}");
    }
    // Toolchains add exports of their own (componentize-py: `exports`, componentize-qjs: `init`);
    // the host never calls them.
    let extra: Vec<_> = exports.difference(&expected_exports).collect();
    if !extra.is_empty() {
        println!("note: {path} also exports {extra:?} (toolchain-internal, ignored by the host)");
    }
    let mut problems = Vec::new();
    for (key, item) in &cw.imports {
        let name = component_resolve.name_world_key(key);
        match item {
            WorldItem::Interface { .. } => {}
            WorldItem::Function(_) => problems.push(format!("imports bare function `{name}`")),
            WorldItem::Type { .. } => continue,
        }
        if world_imports.contains(&name) {
            continue;
        }
        let package = name.split('/').next().unwrap_or_default();
        if !HOST_WASI_PACKAGES.contains(&package) {
            problems.push(format!("imports `{name}`, which the host does not provide"));
        }
    }
    if !problems.is_empty() {
        bail!("{path}: {}", problems.join("; "));
    }

    // Type-level check: the world plus the component's WASI imports must be a supertype of it.
    let remap = resolve.merge(component_resolve)?;
    let merged_cw =
        remap.worlds[component_world.index()].context("component world lost in merge")?;
    let extra: Vec<(WorldKey, WorldItem)> = resolve.worlds[merged_cw]
        .imports
        .iter()
        .filter(|(k, _)| resolve.name_world_key(k).starts_with("wasi:"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut extended = resolve.worlds[world].clone();
    extended.name = format!("{}-check", extended.name);
    for (k, v) in extra {
        extended.imports.insert(k, v);
    }
    let extended = resolve.worlds.alloc(extended);
    wit_component::targets(&resolve, extended, &bytes)
        .with_context(|| format!("{path} does not match the world's types"))?;

    let pkg = resolve.worlds[world]
        .package
        .context("world has no package")?;
    println!(
        "ok: {path} implements {}/{}",
        resolve.packages[pkg].name, resolve.worlds[world].name
    );
    Ok(())
}

// ---- go-adapter-arena ------------------------------------------------------------------------

const ARENA_MAGIC: &[u8; 16] = b"kubewasm-adapter";

/// Injects `cabi_realloc_adapter`, a bump allocator in plain wasm over the Go array that starts
/// with [`ARENA_MAGIC`] followed by its size (u32 LE), so that the WASI adapter never allocates
/// through the Go runtime nor with `memory.grow` (see guest-examples/go/NOTES.md).
fn go_adapter_arena(core: &str, out: &str) -> Result<()> {
    use wasmparser::{Operator, Parser, Payload, TypeRef};

    let bytes = read(core)?;
    let (mut imported_funcs, mut imported_globals) = (0u32, 0u32);
    let (mut types, mut funcs, mut globals) = (0u32, 0u32, 0u32);
    let mut arena = None;
    for payload in Parser::new(0).parse_all(&bytes) {
        match payload? {
            Payload::ImportSection(s) => {
                for imp in s.into_imports() {
                    match imp?.ty {
                        TypeRef::Func(_) | TypeRef::FuncExact(_) => imported_funcs += 1,
                        TypeRef::Global(_) => imported_globals += 1,
                        _ => {}
                    }
                }
            }
            Payload::TypeSection(s) => types = s.count(),
            Payload::FunctionSection(s) => funcs = s.count(),
            Payload::GlobalSection(s) => globals = s.count(),
            Payload::DataSection(s) => {
                for data in s {
                    let data = data?;
                    let wasmparser::DataKind::Active { offset_expr, .. } = data.kind else {
                        continue;
                    };
                    let Some(pos) = data
                        .data
                        .windows(ARENA_MAGIC.len())
                        .position(|w| w == ARENA_MAGIC)
                    else {
                        continue;
                    };
                    let mut ops = offset_expr.get_operators_reader();
                    let Operator::I32Const { value } = ops.read()? else {
                        bail!("data segment offset is not an i32.const");
                    };
                    let size_at = pos + ARENA_MAGIC.len();
                    // The Go linker drops runs of zeros from data segments: missing bytes are 0.
                    let mut size = [0u8; 4];
                    for (i, b) in data.data.iter().skip(size_at).take(4).enumerate() {
                        size[i] = *b;
                    }
                    let size = u32::from_le_bytes(size);
                    let start = value as u32 + pos as u32;
                    arena = Some((start + 32, start + size));
                }
            }
            _ => {}
        }
    }
    let (arena_start, arena_end) =
        arena.context("no adapter arena (header `kubewasm-adapter`) in the data segments")?;

    struct Inject {
        ty: u32,
        func: u32,
        global: u32,
        arena_start: u32,
        arena_end: u32,
    }
    impl wasm_encoder::reencode::Reencode for Inject {
        type Error = std::convert::Infallible;
        fn parse_type_section(
            &mut self,
            types: &mut wasm_encoder::TypeSection,
            section: wasmparser::TypeSectionReader<'_>,
        ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
            wasm_encoder::reencode::utils::parse_type_section(self, types, section)?;
            use wasm_encoder::ValType::I32;
            types.ty().function([I32, I32, I32, I32], [I32]);
            Ok(())
        }
        fn parse_function_section(
            &mut self,
            functions: &mut wasm_encoder::FunctionSection,
            section: wasmparser::FunctionSectionReader<'_>,
        ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
            wasm_encoder::reencode::utils::parse_function_section(self, functions, section)?;
            functions.function(self.ty);
            Ok(())
        }
        fn parse_global_section(
            &mut self,
            globals: &mut wasm_encoder::GlobalSection,
            section: wasmparser::GlobalSectionReader<'_>,
        ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
            wasm_encoder::reencode::utils::parse_global_section(self, globals, section)?;
            globals.global(
                wasm_encoder::GlobalType {
                    val_type: wasm_encoder::ValType::I32,
                    mutable: true,
                    shared: false,
                },
                &wasm_encoder::ConstExpr::i32_const(self.arena_start as i32),
            );
            Ok(())
        }
        fn parse_export_section(
            &mut self,
            exports: &mut wasm_encoder::ExportSection,
            section: wasmparser::ExportSectionReader<'_>,
        ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
            wasm_encoder::reencode::utils::parse_export_section(self, exports, section)?;
            exports.export(
                "cabi_realloc_adapter",
                wasm_encoder::ExportKind::Func,
                self.func,
            );
            Ok(())
        }
        fn parse_code_section(
            &mut self,
            code: &mut wasm_encoder::CodeSection,
            section: wasmparser::CodeSectionReader<'_>,
        ) -> Result<(), wasm_encoder::reencode::Error<Self::Error>> {
            wasm_encoder::reencode::utils::parse_code_section(self, code, section)?;
            // (old_ptr, old_size, align, new_size) -> ptr; fresh allocations only, never freed.
            use wasm_encoder::Instruction as I;
            let mut f = wasm_encoder::Function::new([(1, wasm_encoder::ValType::I32)]);
            for ins in [
                I::LocalGet(1),
                I::If(wasm_encoder::BlockType::Empty),
                I::Unreachable, // the adapter never reallocates
                I::End,
                I::GlobalGet(self.global),
                I::LocalGet(2),
                I::I32Add,
                I::I32Const(1),
                I::I32Sub,
                I::I32Const(0),
                I::LocalGet(2),
                I::I32Sub,
                I::I32And,
                I::LocalTee(4),
                I::LocalGet(3),
                I::I32Add,
                I::I32Const(self.arena_end as i32),
                I::I32GtU,
                I::If(wasm_encoder::BlockType::Empty),
                I::Unreachable, // arena exhausted
                I::End,
                I::LocalGet(4),
                I::LocalGet(3),
                I::I32Add,
                I::GlobalSet(self.global),
                I::LocalGet(4),
                I::End,
            ] {
                f.instruction(&ins);
            }
            code.function(&f);
            Ok(())
        }
    }

    let mut inject = Inject {
        ty: types,
        func: imported_funcs + funcs,
        global: imported_globals + globals,
        arena_start,
        arena_end,
    };
    let mut module = wasm_encoder::Module::new();
    wasm_encoder::reencode::Reencode::parse_core_module(
        &mut inject,
        &mut module,
        wasmparser::Parser::new(0),
        &bytes,
    )
    .map_err(|e| anyhow::anyhow!("re-encoding {core}: {e:?}"))?;
    std::fs::write(out, module.finish()).with_context(|| format!("writing {out}"))?;
    println!("cabi_realloc_adapter over [{arena_start:#x}, {arena_end:#x})");
    Ok(())
}
