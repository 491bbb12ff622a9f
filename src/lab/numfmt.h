// Numbers in the lab's records and messages: %g with a precision ("nan", "inf" spelled out) and
// signed percentages ("+3.1%").
#pragma once
#include <string>

namespace ouro::lab {

std::string fmt(double v, int prec = 4);
std::string pct(double r);

}  // namespace ouro::lab
