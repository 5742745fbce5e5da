//! The coverage guard: every primitive (every family of `define_prims!`, and
//! every kind of the families with kinds) is either covered by the
//! derivative tests (`ad_prims.rs`), the vmap tests (`vmap.rs`) and the
//! native kernel tests (`native.rs`, with `mathfn_c.rs`' case table), or
//! exempt there with a reason. Adding a primitive fails this test until the
//! three tables say how it is tested.

use graft_core::ops::binary::{Binary, Compare};
use graft_core::ops::cumulative::{CumKind, Cumulative};
use graft_core::ops::reduce::{ArgKind, ArgReduce, Reduce, ReduceKind};
use graft_core::ops::unary::Unary;
use graft_core::ops::window::{ReduceWindow, WindowKind};
use graft_core::{DType, Op, Prim};
use std::collections::BTreeSet;

/// The printed names of a family's kinds; `None` for a family with one name.
fn kinds(family: &str) -> Option<Vec<&'static str>> {
    let names = match family {
        "Unary" => Unary::ALL.iter().map(|op| op.name()).collect(),
        "Binary" => Binary::ALL.iter().map(|op| op.name()).collect(),
        "Compare" => Compare::ALL.iter().map(|op| op.name()).collect(),
        "Reduce" => ReduceKind::ALL.iter().map(|&kind| Reduce { kind, axes: vec![] }.name()).collect(),
        "ArgReduce" => [ArgKind::ArgMax, ArgKind::ArgMin]
            .iter()
            .map(|&kind| ArgReduce { kind, axis: 0, index_dtype: DType::I32 }.name())
            .collect(),
        "Cumulative" => CumKind::ALL.iter().map(|&kind| Cumulative { kind, axis: 0, reverse: false }.name()).collect(),
        "ReduceWindow" => WindowKind::ALL
            .iter()
            .map(|&kind| {
                ReduceWindow {
                    kind,
                    window: vec![],
                    strides: vec![],
                    padding: vec![],
                    base_dilation: vec![],
                    window_dilation: vec![],
                }
                .name()
            })
            .collect(),
        _ => return None,
    };
    Some(names)
}

/// Every primitive: `Family`, or `Family::name` for each kind of a family with kinds.
fn universe() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for family in Prim::FAMILIES {
        match kinds(family) {
            Some(names) => all.extend(names.iter().map(|n| format!("{family}::{n}"))),
            None => {
                all.insert(family.to_string());
            }
        }
    }
    all
}

/// Expands `Family::*` to every kind of the family; other entries must be
/// primitives of the universe.
fn expand(table: &str, entry: &str, all: &BTreeSet<String>) -> Vec<String> {
    if let Some(family) = entry.strip_suffix("::*") {
        let names =
            kinds(family).unwrap_or_else(|| panic!("{table}: `{entry}`: `{family}` is not a family with kinds"));
        return names.iter().map(|n| format!("{family}::{n}")).collect();
    }
    assert!(all.contains(entry), "{table}: `{entry}` is not a primitive (families: {:?})", Prim::FAMILIES);
    vec![entry.to_string()]
}

/// Checks one test table: its exemptions have reasons, no primitive is both
/// listed and exempt, and every primitive is one or the other. `Family::*`
/// in `covered` leaves out the kinds `exempt` names.
fn check_table(table: &str, covered: &[String], exempt: &[(&str, &str)]) {
    let all = universe();
    let mut ex = BTreeSet::new();
    for (entry, why) in exempt {
        assert!(!why.trim().is_empty(), "{table}: exempting `{entry}` needs a reason");
        ex.extend(expand(table, entry, &all));
    }
    let mut cov = BTreeSet::new();
    for entry in covered {
        let names = expand(table, entry, &all);
        if !entry.ends_with("::*") {
            assert!(!ex.contains(&names[0]), "{table}: `{entry}` is both covered and exempt");
        }
        cov.extend(names.into_iter().filter(|n| !ex.contains(n)));
    }
    let missing: Vec<&String> = all.iter().filter(|p| !cov.contains(*p) && !ex.contains(*p)).collect();
    assert!(
        missing.is_empty(),
        "{table}: no test covers {missing:?}; add a test and list it in that file's `covered()`, \
         or add it to its `EXEMPT` with the reason"
    );
}

#[test]
fn the_universe_is_every_family() {
    let all = universe();
    for family in Prim::FAMILIES {
        assert!(all.contains(*family) || all.iter().any(|p| p.starts_with(&format!("{family}::"))), "{family}");
    }
    // Spot checks of the naming scheme.
    for p in
        ["Unary::exp", "Binary::add", "Compare::lt", "Reduce::reduce_sum", "ArgReduce::argmin", "DotGeneral", "While"]
    {
        assert!(all.contains(p), "{p} missing from {all:?}");
    }
}

#[test]
fn derivative_tests_cover_every_primitive() {
    check_table("ad_prims.rs", &crate::ad_prims::covered(), crate::ad_prims::EXEMPT);
}

#[test]
fn vmap_tests_cover_every_primitive() {
    check_table("vmap.rs", &crate::vmap::covered(), crate::vmap::EXEMPT);
}

#[test]
fn native_kernel_tests_cover_every_primitive() {
    check_table("native.rs", &crate::native::covered(), crate::native::EXEMPT);
    // What mathfn_c.rs leaves out of its bitwise table is exactly what has no C version.
    let exempt: BTreeSet<String> = crate::native::EXEMPT.iter().map(|(p, _)| p.to_string()).collect();
    for op in crate::mathfn_c::PENDING_UN {
        assert!(exempt.contains(&format!("Unary::{}", op.name())), "{op:?} is pending in mathfn_c.rs but not exempt");
    }
    // A binary op pending for every float dtype has no native kernel at
    // all and must be exempt; one pending for some (f64 `pow`) is covered.
    for op in Binary::ALL {
        let floats = [DType::F32, DType::F64];
        let pending = floats.iter().filter(|&&d| crate::mathfn_c::PENDING_BIN.contains(&(op, d))).count();
        let name = format!("Binary::{}", op.name());
        if pending == floats.len() {
            assert!(exempt.contains(&name), "{op:?} is pending in mathfn_c.rs for every float dtype but not exempt");
        } else if pending > 0 {
            assert!(!exempt.contains(&name), "{op:?} has a native kernel for some dtype but is exempt");
        }
    }
}

#[test]
#[should_panic(expected = "no test covers")]
fn a_table_missing_a_primitive_fails() {
    check_table("test table", &["Unary::*".to_string()], &[]);
}
