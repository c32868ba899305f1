// SentencePiece for load_tokenizer (tokenizer.h), in a library of its own:
// libsentencepiece carries its own copy of protobuf-lite, which clashes with libtorch's
// libprotobuf when both are loaded in one process (a crash before main). So only the
// torch-free `harp` (for `harp data prepare`) and the tokenizer tests link it, and
// register it at start; harp-train and the runtime never load it.
#pragma once

#include "harp/data/tokenizer.h"

namespace harp::data {

// Registers the SentencePiece loader; false when the build found no libsentencepiece
// (load_sentencepiece then says how to get it).
bool enable_sentencepiece();

}  // namespace harp::data
