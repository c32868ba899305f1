// Lowering: adds communication and the end-of-step actions to a compute-only schedule.
//
// Sends and receives are placed the way PyTorch pipelining's `_add_send_recv` does:
// ranks are walked round-robin, a compute action is placed only once its input is
// available, and when it is placed its SEND goes to the producer's list and the
// matching RECV to the consumer's list at the same moment. Every rank therefore sees
// its communication in one global order, which is why the result drains even when
// every send and every receive blocks until its partner is posted (validate.h).
// A RECV is a *post* (irecv); the compute that needs the data waits for its arrival.
// REDUCE_GRAD follows each rank's last backward, STEP follows REDUCE_GRAD.
#pragma once

#include "harp/common/status.h"
#include "harp/schedule/action.h"

namespace harp::schedule {

// REQUIRES: `compute` holds only F and B actions. Returns InvalidArgument if the
// compute order cannot make progress (a rank's next action needs an input that can
// never be produced), naming the stuck ranks.
StatusOr<Schedule> lower(const Schedule& compute);

}  // namespace harp::schedule
