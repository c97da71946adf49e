// Everything an application needs: collectives, the communicator, the fabrics that
// ship with optcast, and the local launcher.
#pragma once

#include "optcast/calibrate.hpp"
#include "optcast/collectives.hpp"
#include "optcast/communicator.hpp"
#include "optcast/error.hpp"
#include "optcast/fabrics.hpp"
#include "optcast/reduction.hpp"
#include "optcast/stream.hpp"
#include "optcast/survive.hpp"
#include "optcast/join.hpp"
#include "optcast/launch.hpp"
#include "optcast/log.hpp"
#include "optcast/net/local.hpp"
#include "optcast/net/ofi.hpp"
#include "optcast/net/sim.hpp"
#include "optcast/net/tcp.hpp"
#include "optcast/task.hpp"
#include "optcast/trace.hpp"
