# attn-analyze plot; redraw with: cd docs/analysis && gnuplot pooling.gp
set terminal svg size 1100,480 dynamic font 'Helvetica,11' noenhanced background rgb 'white'
set output 'pooling.svg'
set datafile separator ','
set key autotitle columnhead
set grid
set key font ',9' samplen 2
set multiplot layout 1,2 title 'Linear attention against average pooling'
set logscale x 2
set logscale y
set key bottom left font ',8'
set xlabel 'n'
set title 'distance of the outputs from the mean value'
set ylabel 'dist (0: average pooling)'
plot 1/0 notitle, 'pooling_pooling.csv' using 4:(strcol(1) eq 'softmax' && $2 == 4 && $3 == 4 ? $7 : 1/0) with linespoints lc rgb '#1f77b4' dt 1 title 'softmax d 4 m 4', 'pooling_pooling.csv' using 4:(strcol(1) eq 'softmax' && $2 == 16 && $3 == 16 ? $7 : 1/0) with linespoints lc rgb '#1f77b4' dt 2 title 'softmax d 16 m 16', 'pooling_pooling.csv' using 4:(strcol(1) eq 'softmax' && $2 == 64 && $3 == 64 ? $7 : 1/0) with linespoints lc rgb '#d62728' dt 3 title 'softmax d 64 m 64', 'pooling_pooling.csv' using 4:(strcol(1) eq 'elu1' && $2 == 4 && $3 == 4 ? $7 : 1/0) with linespoints lc rgb '#2ca02c' dt 1 title 'elu1 d 4 m 4', 'pooling_pooling.csv' using 4:(strcol(1) eq 'elu1' && $2 == 16 && $3 == 16 ? $7 : 1/0) with linespoints lc rgb '#2ca02c' dt 2 title 'elu1 d 16 m 16', 'pooling_pooling.csv' using 4:(strcol(1) eq 'elu1' && $2 == 64 && $3 == 64 ? $7 : 1/0) with linespoints lc rgb '#ff7f0e' dt 3 title 'elu1 d 64 m 64', 'pooling_pooling.csv' using 4:(strcol(1) eq 'favor' && $2 == 16 && $3 == 16 ? $7 : 1/0) with linespoints lc rgb '#9467bd' dt 1 title 'favor d 16 m 16', 'pooling_pooling.csv' using 4:(strcol(1) eq 'favor' && $2 == 16 && $3 == 64 ? $7 : 1/0) with linespoints lc rgb '#9467bd' dt 2 title 'favor d 16 m 64', 'pooling_pooling.csv' using 4:(strcol(1) eq 'favor' && $2 == 16 && $3 == 256 ? $7 : 1/0) with linespoints lc rgb '#8c564b' dt 3 title 'favor d 16 m 256', 1/sqrt(x) lc rgb 'gray60' dt 3 title '~ 1/sqrt(n)'
set logscale x 2
unset logscale y
set key bottom right font ',8'
set xlabel 'n'
set title 'mean row sparsity S'
set ylabel 'S'
plot 1/0 notitle, 'pooling_pooling.csv' using 4:(strcol(1) eq 'softmax' && $2 == 4 && $3 == 4 ? $5 : 1/0) with linespoints lc rgb '#1f77b4' dt 1 title 'softmax d 4 m 4', 'pooling_pooling.csv' using 4:(strcol(1) eq 'softmax' && $2 == 16 && $3 == 16 ? $5 : 1/0) with linespoints lc rgb '#1f77b4' dt 2 title 'softmax d 16 m 16', 'pooling_pooling.csv' using 4:(strcol(1) eq 'softmax' && $2 == 64 && $3 == 64 ? $5 : 1/0) with linespoints lc rgb '#d62728' dt 3 title 'softmax d 64 m 64', 'pooling_pooling.csv' using 4:(strcol(1) eq 'elu1' && $2 == 4 && $3 == 4 ? $5 : 1/0) with linespoints lc rgb '#2ca02c' dt 1 title 'elu1 d 4 m 4', 'pooling_pooling.csv' using 4:(strcol(1) eq 'elu1' && $2 == 16 && $3 == 16 ? $5 : 1/0) with linespoints lc rgb '#2ca02c' dt 2 title 'elu1 d 16 m 16', 'pooling_pooling.csv' using 4:(strcol(1) eq 'elu1' && $2 == 64 && $3 == 64 ? $5 : 1/0) with linespoints lc rgb '#ff7f0e' dt 3 title 'elu1 d 64 m 64', 'pooling_pooling.csv' using 4:(strcol(1) eq 'favor' && $2 == 16 && $3 == 16 ? $5 : 1/0) with linespoints lc rgb '#9467bd' dt 1 title 'favor d 16 m 16', 'pooling_pooling.csv' using 4:(strcol(1) eq 'favor' && $2 == 16 && $3 == 64 ? $5 : 1/0) with linespoints lc rgb '#9467bd' dt 2 title 'favor d 16 m 64', 'pooling_pooling.csv' using 4:(strcol(1) eq 'favor' && $2 == 16 && $3 == 256 ? $5 : 1/0) with linespoints lc rgb '#8c564b' dt 3 title 'favor d 16 m 256'
unset logscale
unset multiplot
