# attn-analyze plot; redraw with: cd docs/analysis && gnuplot approx.gp
set terminal svg size 1500,480 dynamic font 'Helvetica,11' noenhanced background rgb 'white'
set output 'approx.svg'
set datafile separator ','
set key autotitle columnhead
set grid
set key font ',9' samplen 2
set multiplot layout 1,3 title 'FAVOR+ against softmax; elu1 and dsoftmax against exp'
set logscale xy
set key bottom left
set title 'FAVOR+ matrix error (d = 16)'
set xlabel 'm'
set ylabel '|A_favor - A_softmax|_F / |A_softmax|_F'
plot 1/0 notitle, 'approx_favor.csv' using 3:($1 == 0.5 && strcol(2) eq 'orthogonal' ? $5 : 1/0):6 with yerrorlines lc rgb '#1f77b4' dt 1 title 'sd 0.5, orthogonal', 'approx_favor.csv' using 3:($1 == 0.5 && strcol(2) eq 'iid' ? $5 : 1/0):6 with yerrorlines lc rgb '#d62728' dt 2 title 'sd 0.5, iid', 'approx_favor.csv' using 3:($1 == 1 && strcol(2) eq 'orthogonal' ? $5 : 1/0):6 with yerrorlines lc rgb '#2ca02c' dt 1 title 'sd 1, orthogonal', 'approx_favor.csv' using 3:($1 == 1 && strcol(2) eq 'iid' ? $5 : 1/0):6 with yerrorlines lc rgb '#ff7f0e' dt 2 title 'sd 1, iid', 2/sqrt(x) lc rgb 'gray60' dt 3 title '~ 1/sqrt(m)'
set title 'distance from the exp map (n = 256, d = 16)'
set xlabel 'input sd'
set ylabel '|A - A_exp|_F / |A_exp - 1/n|_F'
set key top left
plot x*0.6 lc rgb 'gray60' dt 3 title '~ sd', 'approx_taylor.csv' using 1:(strcol(2) eq 'elu1' ? $4 : 1/0) with linespoints lc rgb '#1f77b4' title 'elu1', 'approx_taylor.csv' using 1:(strcol(2) eq 'dsoftmax' ? $4 : 1/0) with linespoints lc rgb '#d62728' title 'dsoftmax'
set title 'time, d = 64, FAVOR+ m = 256'
set xlabel 'n'
set ylabel 'ms'
set logscale x 2
plot 1/0 notitle, 'approx_crossover.csv' using 2:(strcol(1) eq 'full' ? $3 : 1/0) with linespoints lc rgb '#1f77b4' dt 1 title 'softmax full', 'approx_crossover.csv' using 2:(strcol(1) eq 'full' ? $4 : 1/0) with linespoints lc rgb '#d62728' dt 1 title 'favor full', 'approx_crossover.csv' using 2:(strcol(1) eq 'causal' ? $3 : 1/0) with linespoints lc rgb '#1f77b4' dt 2 title 'softmax causal', 'approx_crossover.csv' using 2:(strcol(1) eq 'causal' ? $4 : 1/0) with linespoints lc rgb '#d62728' dt 2 title 'favor causal'
unset logscale
unset multiplot
