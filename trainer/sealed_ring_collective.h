// The trainers' allreduce in a job with keys: a ring over Gloo's
// connections whose every message is sealed (trainer/collective_seal.h).
//
// Gloo's own allreduce adds what arrives on the wire; here Gloo only moves
// bytes between neighbours (its send and receive of unbound buffers), and
// each rank opens what it receives before it adds it. A reduce-scatter then
// an all-gather, W - 1 steps each, as Gloo's ring: every rank sends and
// receives 2 (W - 1) / W of the data. Chunk c is summed in one fixed order
// (rank c's part, then c + 1's, ... round the ring), and every rank ends
// with the same bits.
//
// The caller's data changes only when the whole sum succeeded: a message
// that does not open (PERMISSION_DENIED) or a peer that is gone
// (UNAVAILABLE) leaves it as it was. After either the collective is spent:
// every later call fails at once, and the trainer's next generation builds
// a new one.
//
// Internal to trainer/gloo_collective.cc, which makes the Gloo context and
// the seal (NewGlooCollective with a seal secret).
#pragma once

#include <memory>

#include <gloo/context.h>

#include "trainer/collective.h"
#include "trainer/collective_seal.h"

namespace tessera {

std::unique_ptr<Collective> NewSealedRingCollective(const GlooCollectiveOptions& options,
                                                    std::shared_ptr<gloo::Context> context, CollectiveSeal seal);

}  // namespace tessera
