/* Embedding a compiled model in a C application: a bundle that `kiln compile gpt -o DIR` wrote
 * (DIR/gpt.o, DIR/gpt.h) linked with the kiln runtime library. It loads a checkpoint, feeds the
 * bytes of a text file to the "tokens" input (consecutive windows, wrapping around), runs the
 * forward pass and prints the first logits -- as `gpt forward` of `kiln compile --exe` does.
 *   embed WEIGHTS.safetensors INPUT.txt */
#include <stdio.h>
#include <stdlib.h>

#include "gpt.h"

int main(int argc, char **argv) {
  char error[1024];
  if (argc != 3) {
    fprintf(stderr, "usage: %s WEIGHTS.safetensors INPUT.txt\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[2], "rb");
  if (!f) {
    fprintf(stderr, "%s: cannot open it\n", argv[2]);
    return 1;
  }
  static unsigned char text[1 << 16];
  const size_t length = fread(text, 1, sizeof text, f);
  fclose(f);
  if (length == 0) {
    fprintf(stderr, "%s: empty input\n", argv[2]);
    return 1;
  }
  kiln_model *model = kiln_model_open(&gpt_bundle, 0, argv[1], error, sizeof error);
  if (!model) {
    fprintf(stderr, "embed: %s\n", error);
    return 1;
  }
  int64_t count = 0;
  int64_t *tokens = kiln_model_tensor(model, "tokens", &count);
  const float *logits = kiln_model_tensor(model, "logits", NULL);
  if (!tokens || !logits) {
    fprintf(stderr, "embed: the model has no tokens input or logits output\n");
    kiln_model_close(model);
    return 1;
  }
  for (int64_t k = 0; k < count; ++k)
    tokens[k] = text[k % (int64_t)length];
  if (!kiln_model_run(model, error, sizeof error)) {
    fprintf(stderr, "embed: %s\n", error);
    kiln_model_close(model);
    return 1;
  }
  printf("logits: %.6f, %.6f, ...\n", logits[0], logits[1]);
  kiln_model_close(model);
  return 0;
}
