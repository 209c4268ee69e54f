//! Rows of a table written in place on its device, in time and memory proportional to the
//! rows written, not to the table.
//!
//! Device tables (`device_tables.rs`) update a step's rows and write them back. candle has no
//! parallel way to do that on a GPU: its `scatter` and `index_add` run one thread per column,
//! each looping over every row id, so the write-back was a gather over the whole table from
//! the table and the new rows laid end to end. That reads and writes every row of the table
//! and its optimizer state each step and holds two more copies of each while it runs, which
//! for a table of gigabytes costs more than the step. Here one candle in-place operation
//! writes just the given rows: on the CPU a loop, on a GPU our kernel (`kernels/rows.cu`, one
//! thread per value written).

use candle_core::{CpuStorage, DType, InplaceOp3, Layout, Tensor};

/// The kernel's PTX, built from `kernels/rows.cu` by the build script with the `cuda` feature.
#[cfg(feature = "cuda")]
const ROWS_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/rows.ptx"));

/// Writes `rows` (`[n, width]`, float32) into `table` (`[table rows, width]`, float32) at rows
/// `ids` (`[n]`, u32, distinct), in place: row `ids[k]` becomes `rows[k]`, every other row stays.
/// Every tensor sharing `table`'s storage sees the change, so `table` must not be one a
/// computation still reads (a tensor candle's backward pass keeps, say).
pub(crate) fn write_rows(table: &Tensor, ids: &Tensor, rows: &Tensor) -> candle_core::Result<()> {
    let (table_rows, width) = table.dims2()?;
    let (n, row_width) = rows.dims2()?;
    if row_width != width || ids.dims() != [n] {
        candle_core::bail!(
            "writing rows of shape {:?} at ids of shape {:?} into a table of {table_rows} rows of {width}",
            rows.dims(),
            ids.dims()
        );
    }
    if (table.dtype(), rows.dtype(), ids.dtype()) != (DType::F32, DType::F32, DType::U32) {
        candle_core::bail!(
            "writing {:?} rows at {:?} ids into a {:?} table: float32 rows at u32 ids are written",
            rows.dtype(),
            ids.dtype(),
            table.dtype()
        );
    }
    if n == 0 {
        return Ok(());
    }
    table.inplace_op3(ids, rows, &WriteRows)
}

/// The in-place operation of [`write_rows`], which checked the shapes and types.
struct WriteRows;

/// Where in its storage a tensor's values lie, as one run, or an error if they do not.
fn span(layout: &Layout) -> candle_core::Result<std::ops::Range<usize>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(start..end),
        None => candle_core::bail!("writing rows needs contiguous tensors"),
    }
}

impl InplaceOp3 for WriteRows {
    fn name(&self) -> &'static str {
        "write-rows"
    }

    fn cpu_fwd(
        &self,
        table: &mut CpuStorage,
        table_layout: &Layout,
        ids: &CpuStorage,
        ids_layout: &Layout,
        rows: &CpuStorage,
        rows_layout: &Layout,
    ) -> candle_core::Result<()> {
        let (CpuStorage::F32(table), CpuStorage::U32(ids), CpuStorage::F32(rows)) = (table, ids, rows) else {
            candle_core::bail!("writing rows needs a float32 table, u32 ids and float32 rows");
        };
        let table = &mut table[span(table_layout)?];
        let (ids, rows) = (&ids[span(ids_layout)?], &rows[span(rows_layout)?]);
        let width = table_layout.dims()[1];
        let table_rows = table_layout.dims()[0];
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= table_rows) {
            candle_core::bail!("row {id} written into a table of {table_rows} rows");
        }
        for (&id, row) in ids.iter().zip(rows.chunks_exact(width)) {
            let at = id as usize * width;
            table[at..at + width].copy_from_slice(row);
        }
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        table: &mut candle_core::CudaStorage,
        table_layout: &Layout,
        ids: &candle_core::CudaStorage,
        ids_layout: &Layout,
        rows: &candle_core::CudaStorage,
        rows_layout: &Layout,
    ) -> candle_core::Result<()> {
        use candle_core::cuda_backend::WrapErr;
        use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};

        let (table_rows, width) = (table_layout.dims()[0], table_layout.dims()[1]);
        let n = ids_layout.dims()[0];
        let device = table.device.clone();
        let ids = ids.as_cuda_slice::<u32>()?.slice(span(ids_layout)?);
        let rows = rows.as_cuda_slice::<f32>()?.slice(span(rows_layout)?);
        let mut table = table.as_cuda_slice_mut::<f32>()?.slice_mut(span(table_layout)?);
        let func = device.get_or_load_custom_func("write_rows_f32", "sparktrain_rows", ROWS_PTX)?;
        // The kernel strides over the values, so a grid capped at u32's range still covers all.
        let config = LaunchConfig::for_num_elems(u32::try_from(n * width).unwrap_or(u32::MAX));
        let mut builder = func.builder();
        builder.arg(&ids);
        builder.arg(&rows);
        builder.arg(&mut table);
        builder.arg(&n);
        builder.arg(&width);
        builder.arg(&table_rows);
        // SAFETY: the kernel's parameters are these six, in this order (`kernels/rows.cu`), and
        // it writes only below `table_rows * width` of `table`.
        unsafe { builder.launch(config) }.w()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn table() -> Tensor {
        Tensor::arange(0f32, 12.0, &Device::Cpu).unwrap().reshape((6, 2)).unwrap()
    }

    #[test]
    fn only_the_given_rows_change() {
        let table = table();
        let ids = Tensor::new(&[4u32, 1], &Device::Cpu).unwrap();
        let rows = Tensor::new(&[[-1f32, -2.0], [-3.0, -4.0]], &Device::Cpu).unwrap();
        write_rows(&table, &ids, &rows).unwrap();
        assert_eq!(
            table.to_vec2::<f32>().unwrap(),
            [[0.0, 1.0], [-3.0, -4.0], [4.0, 5.0], [6.0, 7.0], [-1.0, -2.0], [10.0, 11.0]]
        );
    }

    #[test]
    fn a_row_past_the_table_or_a_wrong_shape_is_refused_and_nothing_is_written() {
        let table = table();
        let before = table.to_vec2::<f32>().unwrap();
        let rows = Tensor::new(&[[-1f32, -2.0], [-3.0, -4.0]], &Device::Cpu).unwrap();
        let error = write_rows(&table, &Tensor::new(&[0u32, 6], &Device::Cpu).unwrap(), &rows).unwrap_err();
        assert!(error.to_string().contains("row 6 written into a table of 6 rows"), "{error}");
        let error = write_rows(&table, &Tensor::new(&[0u32], &Device::Cpu).unwrap(), &rows).unwrap_err();
        assert!(error.to_string().contains("6 rows of 2"), "{error}");
        assert_eq!(table.to_vec2::<f32>().unwrap(), before);
    }
}
