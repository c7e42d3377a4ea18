/* A compiled bundle's description of itself (what `kiln compile` writes into MODEL.o beside the
 * generated code, as the constant `MODEL_bundle`): the program's memory regions, the bytes of its
 * constants region, the symbol table of every named tensor, and the entry point that runs the
 * whole program (a forward pass or a training step) as a sequence of kernel-ABI calls. The
 * runtime (runtime/bundle_loader.h) turns it into an Executable. C11 and C++. */
#ifndef KILN_RUNTIME_BUNDLE_H_
#define KILN_RUNTIME_BUNDLE_H_

#include <stddef.h>
#include <stdint.h>

#include "runtime/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: in columns mode a region's rows function accumulates into `lanes` when given (partial
 * results per part of rows), which code generated for version 1 does not.
 * 3: kiln_attention_args gained `window` (sliding-window attention) before its places.
 * 4: kiln_attention_args gained `bthd` (operands in [B, T, H, D]).
 * 5: kiln_index_args gained `base` (scatter_add into a base).
 * 6: kiln_gemm_args and kiln_attention_args gained `bf16_products` (mixed precision).
 * 7: kiln_matrix gained `bf16` (weights stored in bf16).
 * 8: kiln_index_args gained `widen` (a bf16 table looked up as f32).
 * 9: kiln_run gained `comm`, and the kernel kiln_all_reduce came (data-parallel training).
 * 10: the kernels kiln_reduce_scatter, kiln_all_gather and kiln_rank_chunk came (ZeRO-1).
 * 11: kiln_norm_args gained `y_bf16` (a norm's y stored in bf16: bf16_y).
 * 12: the kernel kiln_cross_entropy came (cross_entropy).
 * 13: kiln_bundle gained `model`, `settings` and `defaults` (what its checkpoints must say).
 * 14: kiln_bundle gained `ranks` (a data-parallel step's).
 * 15: kiln_dropout_args and kiln_attention_args gained `step` (a mask drawn per training step). */
#define KILN_BUNDLE_VERSION 15
#define KILN_REGIONS 5 /* kiln::MemRegion: constants, weights, io, arena, scratch */

/* A named tensor: an input, parameter, state or output (kiln::runtime::Symbol). */
typedef struct kiln_symbol {
  const char *name;
  int64_t kind;  /* 0 input, 1 param, 2 state, 3 output */
  int64_t role;  /* outputs: 0 value, 1 loss, 2 gradient, 3 update */
  int64_t of;    /* gradient, update: the index of the argument's symbol; else -1 */
  int64_t dtype; /* 0 f32, 1 f64, 2 bf16, 3 i32, 4 i64, 5 bool */
  int64_t rank;
  int64_t shape[KILN_MAX_RANK];
  int64_t region, offset, bytes;
  int64_t init_kind; /* params and state: 0 zeros, 1 ones, 2 normal, 3 uniform, 4 xavier */
  double init_scale;
  int64_t domain; /* params and state: 0 real, 1 non-negative, 2 count */
  int64_t range;  /* integer inputs: values in [0, range); 0 = unstated */
} kiln_symbol;

/* Runs the program once over the regions at run->bases: KILN_OK, or the status of the step that
 * failed (its index in *failed_step), having written nothing more. */
typedef int32_t (*kiln_entry)(const kiln_run *run, int64_t *failed_step);

typedef struct kiln_bundle {
  int64_t version; /* KILN_BUNDLE_VERSION */
  const char *name;
  int64_t region_bytes[KILN_REGIONS]; /* each region's base is 64-byte aligned */
  const uint8_t *constants;           /* region_bytes[0] bytes: the constants region */
  int64_t symbol_count;
  const kiln_symbol *symbols; /* the arguments in order, then the outputs */
  int64_t step_count;
  const char *const *step_kinds; /* per step, what it runs: "matmul", "fusion{add gelu}", ... */
  kiln_entry run;
  /* The model of kiln's table it was compiled from and its settings, as a checkpoint's
   * description keeps them ("kiln.model", "kiln.settings": runtime/model_description.h), and the
   * defaults of the settings that fix what its weights mean (a "kiln.settings" array): a
   * checkpoint that says it is of another model or settings is refused when loaded. NULL: a
   * bundle of an IR file, which says nothing. */
  const char *model, *settings, *defaults;
  /* The ranks its collectives run over: a data-parallel training step's (kiln compile --train
   * --ranks N), run under mpirun -np N by its executable; 1 for every other. */
  int64_t ranks;
} kiln_bundle;

/* An application's handle on a bundle (runtime/bundle_api.cc, in the runtime library): its regions
 * allocated, constants filled, weights loaded from a checkpoint. Each function that can fail
 * returns 0 (or NULL) and writes a message into error (error_size bytes, NUL-terminated). */
typedef struct kiln_model kiln_model;
/* threads: 0 for KILN_THREADS if set (a bad value is an error), else every core. weights: a
 * safetensors checkpoint of this model (NULL: the weights initialized from seed 0); one that says
 * it was saved with other settings than the bundle's (an activation) is an error. */
kiln_model *kiln_model_open(const kiln_bundle *bundle, int threads, const char *weights,
                            char *error, size_t error_size);
/* The bytes of the input, parameter, state or output `name` (row-major, in its dtype), and its
 * element count; NULL if the program has no such tensor. Valid until kiln_model_close. A
 * parameter's bytes may be written: a bf16 training step's products read a bf16 copy of it
 * ("bf16_copy.NAME"), which each run then first rewrites from them. */
void *kiln_model_tensor(kiln_model *model, const char *name, int64_t *elements);
/* One run of the program: 1, or 0 with the failed step's message. */
int kiln_model_run(kiln_model *model, char *error, size_t error_size);
void kiln_model_close(kiln_model *model);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_BUNDLE_H_ */
