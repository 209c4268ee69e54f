// Rows of an embedding table written in place on the GPU (rust/train/src/row_write.rs).
//
// candle's `scatter` and `index_add` give each thread one column and loop over every row id in
// it, so writing n rows of width w runs w threads of n iterations each. Here each thread writes
// one value: n * w threads. The ids of one call are distinct, so no two threads write the same
// value; an id at or past the table's rows is skipped (the caller checked them on the host).

extern "C" __global__ void write_rows_f32(
    const unsigned int *ids,
    const float *rows,
    float *table,
    const size_t n_ids,
    const size_t width,
    const size_t table_rows
) {
    const size_t n = n_ids * width;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        const size_t k = i / width;
        const size_t id = ids[k];
        if (id < table_rows) {
            table[id * width + (i - k * width)] = rows[i];
        }
    }
}
