//! Training curves from `metrics.jsonl`, drawn with `plotters` as
//! `curves.png` and `curves.svg`: the training and test loss per epoch on
//! the left, the test accuracy on the right (when the program has one).
//! The PNG's text uses DejaVu Sans, embedded in the binary
//! (`assets/DejaVuSans.ttf`, Bitstream Vera licence, see
//! `assets/DejaVuSans.LICENSE`), so no system font is needed.

use crate::Fail;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// One logged epoch.
struct Row {
    epoch: f64,
    loss: f64,
    test_loss: Option<f64>,
    test_accuracy: Option<f64>,
}

fn rows(path: &Path) -> Result<Vec<Row>, Fail> {
    let text = std::fs::read_to_string(path).map_err(|e| Fail::new(format!("error: {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| Fail::new(format!("error: {}: a line is not JSON ({e})", path.display())))?;
        let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
        if let (Some(epoch), Some(loss)) = (num("epoch"), num("loss")) {
            out.push(Row { epoch, loss, test_loss: num("test_loss"), test_accuracy: num("test_accuracy") });
        }
    }
    Ok(out)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, rows: &[Row]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: &dyn std::fmt::Display| x.to_string();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let has_acc = rows.iter().any(|r| r.test_accuracy.is_some());
    let panels = if has_acc { root.split_evenly((1, 2)) } else { vec![root] };
    let last = rows.last().map_or(1.0, |r| r.epoch).max(1.0);
    let max_loss = rows.iter().flat_map(|r| [Some(r.loss), r.test_loss]).flatten().fold(0.0f64, f64::max).max(1e-9);
    let mut chart = ChartBuilder::on(&panels[0])
        .caption("Loss", ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..last, 0.0..max_loss * 1.05)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc("loss")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| e(&x))?;
    chart
        .draw_series(LineSeries::new(rows.iter().map(|r| (r.epoch, r.loss)), BLUE.stroke_width(2)))
        .map_err(|x| e(&x))?
        .label("training")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    if rows.iter().any(|r| r.test_loss.is_some()) {
        chart
            .draw_series(LineSeries::new(
                rows.iter().filter_map(|r| r.test_loss.map(|t| (r.epoch, t))),
                RED.stroke_width(2),
            ))
            .map_err(|x| e(&x))?
            .label("test")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|x| e(&x))?;
    if has_acc {
        let lo = rows.iter().filter_map(|r| r.test_accuracy).fold(1.0f64, f64::min).min(0.9) * 100.0;
        let mut acc = ChartBuilder::on(&panels[1])
            .caption("Test accuracy", ("sans-serif", 24))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..last, (lo - 1.0).max(0.0)..100.0)
            .map_err(|x| e(&x))?;
        acc.configure_mesh()
            .x_desc("epoch")
            .y_desc("accuracy (%)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|x| e(&x))?;
        acc.draw_series(LineSeries::new(
            rows.iter().filter_map(|r| r.test_accuracy.map(|a| (r.epoch, 100.0 * a))),
            RGBColor(0, 140, 60).stroke_width(2),
        ))
        .map_err(|x| e(&x))?;
    }
    root_present(&panels[0])
}

fn root_present<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>) -> Result<(), String> {
    area.present().map_err(|x| x.to_string())
}

/// Draws `curves.png` and `curves.svg` in `dir` from the metrics log.
pub fn curves(metrics: &Path, dir: &Path) -> Result<(), Fail> {
    let rows = rows(metrics)?;
    if rows.is_empty() {
        return Ok(());
    }
    // Registering twice is harmless; a font that fails to parse is a build defect.
    let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    let size = (1000, 420);
    let png = dir.join("curves.png");
    draw(BitMapBackend::new(&png, size).into_drawing_area(), &rows)
        .map_err(|e| Fail::new(format!("error: {}: {e}", png.display())))?;
    let svg = dir.join("curves.svg");
    draw(SVGBackend::new(&svg, size).into_drawing_area(), &rows)
        .map_err(|e| Fail::new(format!("error: {}: {e}", svg.display())))?;
    Ok(())
}
