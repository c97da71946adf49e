#pragma once

namespace optcast::tools {
// optcast simulate ...; returns the exit status.
int cmd_simulate(int argc, char** argv);
}

namespace optcast::tools {
// optcast calibrate ...; returns the exit status.
int cmd_calibrate(int argc, char** argv);
}
