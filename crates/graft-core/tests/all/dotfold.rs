//! `opt::fold_transposed_operands`: a `transpose` feeding `dot_general` is
//! folded into its dimension numbers when the operand's free axes keep
//! their order, with the unfolded product's bits; otherwise it stays.

use crate::common;

use common::{build as func, run, Rng};
use graft_core::ops::Prim;
use graft_core::opt::{fold_transposed_operands, simplify};
use graft_core::{DType, Func, TensorType};

fn t32(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

fn transposes(f: &Func) -> usize {
    f.eqns.iter().filter(|e| matches!(e.prim, Prim::Transpose(_))).count()
}

fn bits(t: &graft_core::Tensor) -> Vec<u32> {
    t.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect()
}

/// (operand shapes, which operands are transposed by which permutation,
/// dims (lhs_contract, rhs_contract, lhs_batch, rhs_batch) of the product
/// of the transposed operands, whether the fold applies).
#[allow(clippy::type_complexity)]
fn cases() -> Vec<([Vec<usize>; 2], [Option<Vec<usize>>; 2], [Vec<usize>; 4], bool)> {
    let v = |s: &[usize]| s.to_vec();
    vec![
        // x @ transpose(w), the layer's input gradient: both sizes of the
        // GEMM's routes (the column-major right operand of session 25).
        ([v(&[128, 512]), v(&[512, 512])], [None, Some(v(&[1, 0]))], [v(&[1]), v(&[0]), v(&[]), v(&[])], true),
        ([v(&[7, 13]), v(&[5, 13])], [None, Some(v(&[1, 0]))], [v(&[1]), v(&[0]), v(&[]), v(&[])], true),
        // transpose(a) @ b, the weight gradient's form.
        ([v(&[64, 33]), v(&[64, 48])], [Some(v(&[1, 0])), None], [v(&[1]), v(&[0]), v(&[]), v(&[])], true),
        // Both.
        ([v(&[9, 6]), v(&[11, 9])], [Some(v(&[1, 0])), Some(v(&[1, 0]))], [v(&[1]), v(&[0]), v(&[]), v(&[])], true),
        // A batch axis moved to the front (what vmap does).
        ([v(&[5, 4, 6]), v(&[4, 6, 3])], [Some(v(&[1, 0, 2])), None], [v(&[2]), v(&[1]), v(&[0]), v(&[0])], true),
        // Two free axes swapped: the result's order would change; kept.
        ([v(&[3, 5, 6]), v(&[6, 2])], [Some(v(&[1, 0, 2])), None], [v(&[2]), v(&[0]), v(&[]), v(&[])], false),
    ]
}

#[test]
fn transposed_operands_fold_with_the_unfolded_bits() {
    let mut rng = Rng(21);
    for (shapes, perms, dims, folds) in cases() {
        let f = func(&[t32(&shapes[0]), t32(&shapes[1])], |b, p| {
            let mut ops = [p[0], p[1]];
            for (o, perm) in ops.iter_mut().zip(&perms) {
                if let Some(perm) = perm {
                    *o = b.transpose(*o, perm)?;
                }
            }
            Ok(vec![b.dot_general(ops[0], ops[1], &dims[0], &dims[1], &dims[2], &dims[3])?])
        });
        let inputs = [rng.tensor(&t32(&shapes[0]), -1.0, 1.0), rng.tensor(&t32(&shapes[1]), -1.0, 1.0)];
        let folded = fold_transposed_operands(&f).unwrap();
        assert_eq!(folded.is_some(), folds, "{shapes:?} {perms:?}");
        let g = simplify(&f);
        let want = perms.iter().filter(|p| p.is_some()).count();
        assert_eq!(transposes(&g), if folds { 0 } else { want }, "{shapes:?} {perms:?}:\n{g}");
        let (a, b) = (run(&f, &inputs), run(&g, &inputs));
        assert_eq!(a[0].shape(), b[0].shape());
        assert_eq!(bits(&a[0]), bits(&b[0]), "{shapes:?} {perms:?}");
    }
}

/// A transpose with another reader stays for it; the product reads the
/// operand in place all the same.
#[test]
fn a_transpose_read_elsewhere_stays() {
    let f = func(&[t32(&[4, 6]), t32(&[6, 6])], |b, p| {
        let wt = b.transpose(p[1], &[1, 0])?;
        let y = b.dot_general(p[0], wt, &[1], &[0], &[], &[])?;
        Ok(vec![y, wt])
    });
    let g = simplify(&f);
    assert_eq!(transposes(&g), 1);
    let dot = g.eqns.iter().find(|e| matches!(e.prim, Prim::DotGeneral(_))).unwrap();
    assert_eq!(dot.inputs[1], g.params[1], "the product reads w itself:\n{g}");
    let mut rng = Rng(2);
    let inputs = [rng.tensor(&t32(&[4, 6]), -1.0, 1.0), rng.tensor(&t32(&[6, 6]), -1.0, 1.0)];
    let (a, b) = (run(&f, &inputs), run(&g, &inputs));
    assert_eq!(bits(&a[0]), bits(&b[0]));
    assert_eq!(bits(&a[1]), bits(&b[1]));
}
