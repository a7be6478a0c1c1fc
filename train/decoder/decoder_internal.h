/* Shared by the decoder scaffold's files (train/decoder/); not a public
 * interface: families use zt_decoder.h. */
#ifndef ZT_DECODER_INTERNAL_H
#define ZT_DECODER_INTERNAL_H

#include "zt_decoder.h"

void decoder_staging_free(zt_host_staging *h);
zt_status decoder_staging_take(zt_host_staging *h, zt_ctx *ctx, zt_stream *s, size_t bytes, void **out);
/* An activation buffer of `bytes` on the device (element type: the layout's business). */
zt_status decoder_alloc_bytes(zt_ctx *ctx, zt_tensor *t, size_t bytes, zt_category cat, const char *label);
zt_status decoder_queue_losses(zt_decoder *d, zt_ctx *ctx, zt_stream *s, const float *losses, size_t N);
zt_status decoder_copy_input(zt_decoder *d, zt_ctx *ctx, int l, zt_copy_kind kind);
zt_status decoder_input_retire(zt_decoder *d, zt_ctx *ctx, int l);
zt_status decoder_input_land(zt_decoder *d, zt_ctx *ctx, int l);

#endif
