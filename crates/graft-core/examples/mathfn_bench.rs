//! Scratch timing of `ops::mathfn` vs std/libm per element, single thread,
//! 1M elements (min over repeats). Run:
//! `cargo run --release -p graft-core --example mathfn_bench`.

use graft_core::ops::mathfn::*;
use std::hint::black_box;
use std::time::Instant;

const N: usize = 1 << 20;

fn time<T: Copy>(name: &str, xs: &[T], o: &mut [T], f: impl Fn(&[T], &mut [T])) {
    let mut best = f64::INFINITY;
    for _ in 0..15 {
        let t = Instant::now();
        f(black_box(xs), black_box(&mut *o));
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("{name:<16} {:7.3} ns/elem", best * 1e9 / xs.len() as f64);
}

fn main() {
    let x32: Vec<f32> = (0..N).map(|i| ((i % 1000) as f32 - 500.0) / 50.0).collect();
    let x64: Vec<f64> = x32.iter().map(|&x| x as f64).collect();
    let (mut o32, mut o64) = (vec![0f32; N], vec![0f64; N]);
    time("std exp f32", &x32, &mut o32, |a, o| o.iter_mut().zip(a).for_each(|(o, &x)| *o = x.exp()));
    time("fast exp f32", &x32, &mut o32, exp_f32_slice);
    time("std exp f64", &x64, &mut o64, |a, o| o.iter_mut().zip(a).for_each(|(o, &x)| *o = x.exp()));
    time("fast exp f64", &x64, &mut o64, exp_f64_slice);
    time("std tanh f32", &x32, &mut o32, |a, o| o.iter_mut().zip(a).for_each(|(o, &x)| *o = x.tanh()));
    time("fast tanh f32", &x32, &mut o32, tanh_f32_slice);
    time("std tanh f64", &x64, &mut o64, |a, o| o.iter_mut().zip(a).for_each(|(o, &x)| *o = x.tanh()));
    time("fast tanh f64", &x64, &mut o64, tanh_f64_slice);
}
